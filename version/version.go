// Package version holds the build version, set by the Makefile's ldflags.
package version

// Version is overwritten at link time (-X); "dev" for plain go builds.
var Version = "dev"
