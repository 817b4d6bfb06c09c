package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// Output formats of every listing (-o), as kubectl and the openstack CLI
// name them: table for people, json and yaml for tools, value for shell
// loops (the selected columns, space separated, no header).
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
	formatValue = "value"
)

var formats = []string{formatTable, formatJSON, formatYAML, formatValue}

// outputFlags are -o/--output and -c/--column, shared by every listing.
type outputFlags struct {
	format  string
	columns []string
}

func (o *outputFlags) register(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVarP(&o.format, "output", "o", "", "output format of listings: "+strings.Join(formats, ", ")+" (default table)")
	// The openstack CLI's spelling of the same choice (a command with a
	// --format of its own, e.g. an export's document format, shadows it).
	pf.StringVarP(&o.format, "format", "f", "", "same as -o (the openstack CLI's name)")
	pf.StringSliceVarP(&o.columns, "column", "c", nil, "show only this column of a listing (repeat, or separate with commas)")
	for _, name := range []string{"output", "format"} {
		_ = root.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return formats, cobra.ShellCompDirectiveNoFileComp
		})
	}
}

func (o *outputFlags) validate() error {
	if o.format != "" && !slices.Contains(formats, o.format) {
		return usagef("-o %q: not an output format (want one of %s)", o.format, strings.Join(formats, ", "))
	}
	return nil
}

// formatOr is the chosen format, or def when -o was not given.
func (o *outputFlags) formatOr(def string) string {
	if o.format == "" {
		return def
	}
	return o.format
}

// listing is a table of rows whose columns have a key (json/yaml field
// and -c name, snake_case) and a header (the key in upper case).
type listing struct {
	keys []string
	rows [][]any
}

func newListing(keys ...string) *listing { return &listing{keys: keys} }

func (l *listing) add(vals ...any) {
	if len(vals) != len(l.keys) {
		panic(fmt.Sprintf("listing: %d values for %d columns", len(vals), len(l.keys)))
	}
	l.rows = append(l.rows, vals)
}

// selectColumns keeps the columns named by -c, in that order; a column is
// named by its key or its header, in any case.
func (l *listing) selectColumns(names []string) (*listing, error) {
	if len(names) == 0 {
		return l, nil
	}
	var idx []int
	for _, n := range names {
		want := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(n), " ", "_"))
		i := slices.Index(l.keys, want)
		if i < 0 {
			return nil, usagef("-c %q: no such column (columns: %s)", n, strings.Join(l.keys, ", "))
		}
		idx = append(idx, i)
	}
	out := &listing{}
	for _, i := range idx {
		out.keys = append(out.keys, l.keys[i])
	}
	for _, r := range l.rows {
		row := make([]any, len(idx))
		for j, i := range idx {
			row[j] = r[i]
		}
		out.rows = append(out.rows, row)
	}
	return out, nil
}

// write prints l in the format of o (table when none was chosen).
func (o *outputFlags) write(w io.Writer, l *listing) error {
	l, err := l.selectColumns(o.columns)
	if err != nil {
		return err
	}
	switch o.formatOr(formatTable) {
	case formatJSON:
		return writeJSONRows(w, l)
	case formatYAML:
		return writeYAMLRows(w, l)
	case formatValue:
		for _, r := range l.rows {
			cells := make([]string, len(r))
			for i, v := range r {
				cells[i] = cellText(v)
			}
			fmt.Fprintln(w, strings.Join(cells, " "))
		}
		return nil
	default:
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		heads := make([]string, len(l.keys))
		for i, k := range l.keys {
			heads[i] = strings.ToUpper(strings.ReplaceAll(k, "_", " "))
		}
		fmt.Fprintln(tw, strings.Join(heads, "\t"))
		for _, r := range l.rows {
			cells := make([]string, len(r))
			for i, v := range r {
				cells[i] = cellText(v)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		return tw.Flush()
	}
}

// cellText renders one value for a table: "-" for nothing, maps as
// k=v,k=v (sorted), lists comma separated.
func cellText(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case *string:
		if x == nil {
			return "-"
		}
		return cellText(*x)
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case []string:
		if len(x) == 0 {
			return "-"
		}
		return strings.Join(x, ",")
	case map[string]string:
		if len(x) == 0 {
			return "-"
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + x[k]
		}
		return strings.Join(parts, ",")
	case fmt.Stringer:
		return cellText(x.String())
	}
	return fmt.Sprint(v)
}

// writeJSONRows prints an array of objects whose keys keep the column order.
func writeJSONRows(w io.Writer, l *listing) error {
	var b bytes.Buffer
	b.WriteString("[")
	for i, r := range l.rows {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  {")
		for j, v := range r {
			if j > 0 {
				b.WriteString(",")
			}
			k, _ := json.Marshal(l.keys[j])
			val, err := json.Marshal(v)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "\n    %s: %s", k, val)
		}
		b.WriteString("\n  }")
	}
	if len(l.rows) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	_, err := w.Write(b.Bytes())
	return err
}

// writeYAMLRows prints a sequence of mappings in column order.
func writeYAMLRows(w io.Writer, l *listing) error {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range l.rows {
		m := &yaml.Node{Kind: yaml.MappingNode}
		for j, v := range r {
			var val yaml.Node
			if err := val.Encode(v); err != nil {
				return err
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: l.keys[j]}, &val)
		}
		seq.Content = append(seq.Content, m)
	}
	if len(seq.Content) == 0 {
		_, err := io.WriteString(w, "[]\n")
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(seq); err != nil {
		return err
	}
	return enc.Close()
}

// writeDocument prints one object (a record, a report) as json or yaml.
func writeDocument(w io.Writer, format string, v any) error {
	if format == formatYAML {
		// Through JSON, so the field names are the JSON ones.
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return err
		}
		blockStyle(&doc)
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return err
		}
		return enc.Close()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// blockStyle undoes the flow style YAML gives a document parsed from JSON,
// and the quotes it keeps on plain strings.
func blockStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
	for _, c := range n.Content {
		blockStyle(c)
	}
}
