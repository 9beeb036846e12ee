// Package cli holds the flag-set scaffold that cohort's subcommands (in
// cmd/cohort and bench) share: a flag set whose -h prints the command's
// usage text and then its flags, and the exit status a failed parse ends
// the command with.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// NewFlagSet returns a flag set for the command name (e.g. "cohort plan
// fit") that reports its errors to out and whose usage is the text usage
// followed by the flags' defaults.
func NewFlagSet(name, usage string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs. When the command ends there it returns false
// and the command's exit status: 0 after -h (the usage was printed), 2 for
// a bad flag (the flag package has reported it).
func Parse(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// ParseFlags is Parse for a command that takes flags only: arguments left
// after the flags end it too, with status 2 and a message naming them.
func ParseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if status, ok := Parse(fs, args); !ok {
		return status, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return 2, false
	}
	return 0, true
}

// WriteJSON writes v as indented JSON and a newline to the file path, or
// to stdout when path is "" (a command's -o flag).
func WriteJSON(path string, stdout io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "" {
		_, err = stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
