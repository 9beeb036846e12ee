// Package datasets provides ready-made data.Dataset implementations: MNIST
// read from its IDX files, numeric CSV tables, byte-level text windows for
// language models, and seeded synthetic data shaped like MNIST.
//
// Every loader validates its input before trusting it: a missing, truncated
// or malformed file is a returned error that names the file (and the row,
// column or record) and what was wrong; sizes read from headers are bounded
// before anything is allocated.
package datasets
