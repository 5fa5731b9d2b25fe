module github.com/taskscope/taskscope

go 1.26.8

require (
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.12
)
