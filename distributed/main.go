package distributed

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

// Main is a training program's main: it runs body under a Stopper for
// SIGINT and SIGTERM (every rank finishes its step, saves a checkpoint if
// it keeps them, and exits 130 or 143; a second signal exits at once; see
// Stopper.AfterStep) and exits the process. On an error it prints
// "prefix+name: err" to stderr and exits with rendezvous.Fail's status,
// which records the error for the launcher. prefix also starts package
// log's lines (slog's default handler writes through it): "[rank N] " for
// a process that mpirun or srun started (obs.Options.LinePrefix).
func Main(name, prefix string, body func(ctx context.Context, stop *Stopper) error) {
	log.SetPrefix(prefix)
	stop := NotifyStop(context.Background())
	ctx := stop.Context()
	err := body(ctx, stop)
	stop.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+name+":", err)
		os.Exit(rendezvous.Fail(ctx, err))
	}
}
