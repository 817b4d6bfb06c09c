// Package oslo produces Nova-shaped traffic the way oslo.messaging's
// rabbit driver does: the v2.0 envelope, serialised like Python's
// json.dumps, and the message properties. scourctl publish-sample, the
// tests and the ingest benchmark use it; scourd itself only consumes
// (package notification decodes).
package oslo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Encode wraps an inner oslo message (JSON object text) in the
// oslo.messaging v2.0 envelope, byte for byte as oslo's rabbit driver
// writes it: both levels serialised like Python's json.dumps (separators
// ", " and ": ", ensure_ascii \uXXXX escapes, key order kept).
// Publishers of test and sample traffic use it; scour itself only decodes.
func Encode(inner []byte) ([]byte, error) {
	msg, err := PythonJSON(inner)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"oslo.version": "2.0", "oslo.message": `)
	writePyString(&b, string(msg))
	b.WriteString("}")
	return b.Bytes(), nil
}

// PythonJSON re-serialises JSON text as Python's json.dumps would, keeping
// key order and number spelling.
func PythonJSON(in []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var b bytes.Buffer
	if err := writePyValue(&b, dec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return b.Bytes(), nil
}

func writePyValue(b *bytes.Buffer, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		closing := map[json.Delim]string{'{': "}", '[': "]"}[t]
		b.WriteString(t.String())
		for i := 0; dec.More(); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			if t == '{' {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				writePyString(b, key.(string))
				b.WriteString(": ")
			}
			if err := writePyValue(b, dec); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
		b.WriteString(closing)
	case string:
		writePyString(b, t)
	case json.Number:
		b.WriteString(t.String())
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case nil:
		b.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON token %v", tok)
	}
	return nil
}

// writePyString writes s as Python's json.dumps(ensure_ascii=True) does.
func writePyString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r > 0x7e:
			if r > 0xffff { // surrogate pair, as Python writes astral characters
				r -= 0x10000
				hi, lo := 0xd800+(r>>10), 0xdc00+(r&0x3ff)
				for _, u := range []rune{hi, lo} {
					b.WriteString(`\u`)
					b.WriteByte(hex[u>>12&0xf])
					b.WriteByte(hex[u>>8&0xf])
					b.WriteByte(hex[u>>4&0xf])
					b.WriteByte(hex[u&0xf])
				}
				continue
			}
			b.WriteString(`\u`)
			b.WriteByte(hex[r>>12&0xf])
			b.WriteByte(hex[r>>8&0xf])
			b.WriteByte(hex[r>>4&0xf])
			b.WriteByte(hex[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
