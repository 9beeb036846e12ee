// Package all links every backend of package distributed into a program:
// import it for its side effect, beside package distributed,
//
//	import (
//		"github.com/cohortml/cohort/distributed"
//		_ "github.com/cohortml/cohort/distributed/backend/all" // native, mpi
//	)
//
//	pg, err := distributed.InitFromEnv(ctx)
//
// so that Options.Backend and COHORT_BACKEND can name any of them. A
// program that wants only one imports that backend's package instead.
package all

import (
	_ "github.com/cohortml/cohort/distributed/backend/mpi"    // "mpi": the MPI library's collectives
	_ "github.com/cohortml/cohort/distributed/backend/native" // "native": cohort's collectives over tcp, shm, inproc
)
