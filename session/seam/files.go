package seam

// MaxFileBytes bounds one upload or download.
const MaxFileBytes = 256 << 20
