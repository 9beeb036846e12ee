package cohort_test

// optimGoldenRunners covers optimizers, gradient clipping and LR schedules.
func optimGoldenRunners() map[string]goldenRunner { return map[string]goldenRunner{} }
