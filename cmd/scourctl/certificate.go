package main

import (
	_ "embed"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/scour-project/scour/claims"
)

//go:embed certificate.html.tmpl
var certificateHTML string

var certificateTmpl = template.Must(template.New("certificate").Funcs(template.FuncMap{
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if v != nil {
				return v.UTC().Format("2006-01-02 15:04:05 UTC")
			}
		}
		return "-"
	},
	"upper": strings.ToUpper,
	"dash":  recordsDash,
}).Parse(certificateHTML))

// writeCertificateHTML renders records as one printable page each: the
// certificate of sanitization a person reads (the JSON stays the machine
// format and the signed one).
func writeCertificateHTML(w io.Writer, recs []claims.Record) error {
	return certificateTmpl.Execute(w, recs)
}
