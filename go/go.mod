module rpal.dev/rpal

go 1.26.0

require (
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)
