module gpuscale.local/bench/peer

go 1.25.5

require (
	github.com/pmady/keda-gpu-scaler v0.6.0
	github.com/prometheus/client_golang v1.23.2
	go.uber.org/zap v1.28.0
	google.golang.org/grpc v1.82.0
)

require (
	github.com/NVIDIA/go-nvml v0.13.3-1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.38.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260414002931-afd174a4e478 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

// The peer's release source, tag v0.6.0 unchanged, beside the repository (the module proxy does not serve
// the module itself; it serves every dependency in its go.sum). bench/_peer.py builds a copy of this
// module with the replacement pointed at --peer-source instead, where given.
replace github.com/pmady/keda-gpu-scaler => ../../../shared/peer/keda-gpu-scaler-v0.6.0
