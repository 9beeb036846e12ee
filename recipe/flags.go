package recipe

import (
	"flag"
	"fmt"
	"io"
)

// CheckpointFlags registers the example programs' checkpoint flags on fs
// into dir, every and keep: -checkpoint-dir (none by default),
// -checkpoint-every (100 steps) and -checkpoint-keep (2; 0 keeps all).
// Call the function it returns after fs.Parse: it warns on w, as prog,
// about -checkpoint-every or -checkpoint-keep given without
// -checkpoint-dir, where they do nothing.
func CheckpointFlags(fs *flag.FlagSet, prog string, dir *string, every, keep *int) (warn func(w io.Writer)) {
	fs.StringVar(dir, "checkpoint-dir", "", "save the training state in this directory and resume from its newest complete checkpoint")
	fs.IntVar(every, "checkpoint-every", 100, "steps between checkpoints (with -checkpoint-dir)")
	fs.IntVar(keep, "checkpoint-keep", 2, "checkpoints to keep (0: all)")
	return func(w io.Writer) {
		if *dir != "" {
			return
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "checkpoint-every" || f.Name == "checkpoint-keep" {
				fmt.Fprintf(w, "%s: warning: -%s does nothing without -checkpoint-dir\n", prog, f.Name)
			}
		})
	}
}
