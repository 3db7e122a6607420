package serve

// SetTestPause sets testPause; nil removes it.
func SetTestPause(f func()) { testPause = f }
