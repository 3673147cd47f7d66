module rpal.dev/rpal/cmd/rpal-bench-go

go 1.26.0

require (
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	rpal.dev/rpal v0.0.0
)

require (
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace rpal.dev/rpal => ../..
