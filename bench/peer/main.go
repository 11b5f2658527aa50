// Command peer-scaler serves pmady/keda-gpu-scaler's own external scaler for bench/peer_compare.py: the
// peer's pkg/scaler (scaler.NewGPUExternalScaler) over gRPC, wired as the peer's
// cmd/keda-gpu-scaler/main.go wires it (the collector wrapped by pkg/metrics with /metrics served, the gRPC
// health service driven by pkg/healthcheck, reflection, the probe server), with the peer's
// gpu.MockCollector in place of NVML.
//
// The GPUs are a JSON list of the peer's gpu.Metrics (field names as in pkg/gpu: GPUUtilization,
// MemoryUsedMiB, ...), read from --gpus at start and again on SIGHUP: the bench rewrites the file and sends
// the signal for a step. Each reading becomes a new gpu.MockCollector, swapped in atomically, so a call never
// sees half a step (the MockCollector's Devices field is read without a lock).
//
// "peer-scaler scrape-cost --url URL --n N" instead scrapes a vLLM /metrics endpoint N times with the peer's
// own pkg/vllm client and prints the process's CPU seconds and each scrape's wall time as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	pb "github.com/pmady/keda-gpu-scaler/pkg/externalscaler"
	"github.com/pmady/keda-gpu-scaler/pkg/gpu"
	"github.com/pmady/keda-gpu-scaler/pkg/healthcheck"
	"github.com/pmady/keda-gpu-scaler/pkg/metrics"
	"github.com/pmady/keda-gpu-scaler/pkg/probes"
	"github.com/pmady/keda-gpu-scaler/pkg/scaler"
	"github.com/pmady/keda-gpu-scaler/pkg/vllm"
)

// stepped is a gpu.MetricsCollector that delegates to the current gpu.MockCollector.
type stepped struct {
	current atomic.Pointer[gpu.MockCollector]
}

func (s *stepped) CollectAll() ([]gpu.Metrics, error)       { return s.current.Load().CollectAll() }
func (s *stepped) CollectDevice(i int) (gpu.Metrics, error) { return s.current.Load().CollectDevice(i) }
func (s *stepped) CollectByUUID(u string) (gpu.Metrics, error) {
	return s.current.Load().CollectByUUID(u)
}
func (s *stepped) DeviceCount() (int, error) { return s.current.Load().DeviceCount() }
func (s *stepped) Close() error              { return nil }

func (s *stepped) load(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var devices []gpu.Metrics
	if err := json.Unmarshal(raw, &devices); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	s.current.Store(gpu.NewMockCollector(devices))
	return len(devices), nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "scrape-cost" {
		os.Exit(scrapeCost(os.Args[2:]))
	}
	var (
		host        = flag.String("host", "127.0.0.1", "address to listen on")
		port        = flag.Int("port", 0, "gRPC port (0: any free one)")
		metricsPort = flag.Int("metrics-port", -1, "Prometheus /metrics port (0: any free one; -1: off)")
		probePort   = flag.Int("probe-port", -1, "/healthz and /readyz port (0: any free one; -1: off)")
		gpusFile    = flag.String("gpus", "", "JSON list of gpu.Metrics; re-read on SIGHUP")
		logLevel    = flag.String("log-level", "info", "debug, info, warn, error")
	)
	flag.Parse()
	logger := newLogger(*logLevel)
	defer func() { _ = logger.Sync() }()

	collector := &stepped{}
	if _, err := collector.load(*gpusFile); err != nil {
		fail("reading the GPUs: %v", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if n, err := collector.load(*gpusFile); err != nil {
				logger.Error("GPUs not re-read; keeping the previous ones", zap.Error(err))
			} else {
				logger.Debug("GPUs re-read", zap.Int("count", n))
			}
		}
	}()

	// as the peer's main: instrumentation and /metrics on by default, then the probe server, the scaler,
	// the health service with its NVML checker, reflection
	var served gpu.MetricsCollector = collector
	out := map[string]int{"pid": os.Getpid()}
	if *metricsPort >= 0 {
		metrics.Register(prometheus.DefaultRegisterer)
		served = metrics.Wrap(collector)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		out["metrics_port"] = serveHTTP(*host, *metricsPort, mux)
	}
	var probeState probes.State
	if *probePort >= 0 {
		out["probe_port"] = serveHTTP(*host, *probePort, probes.Handler(&probeState))
	}
	if _, err := served.CollectAll(); err == nil {
		probeState.MarkReady()
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		fail("listening: %v", err)
	}
	server := grpc.NewServer()
	pb.RegisterExternalScalerServer(server, scaler.NewGPUExternalScaler(served, logger))
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(server, healthServer)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go healthcheck.New(served, healthServer, healthcheck.DefaultInterval, logger).Run(ctx)
	reflection.Register(server)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		cancel()
		server.GracefulStop()
	}()
	out["port"] = lis.Addr().(*net.TCPAddr).Port
	line, _ := json.Marshal(out)
	fmt.Println(string(line)) // the bench reads the ports from this first line
	if err := server.Serve(lis); err != nil {
		fail("serving: %v", err)
	}
}

func serveHTTP(host string, port int, handler http.Handler) int {
	lis, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		fail("listening: %v", err)
	}
	go func() { _ = http.Serve(lis, handler) }()
	return lis.Addr().(*net.TCPAddr).Port
}

// scrapeCost: the peer's vllm.Client.Scrape, as its scaler calls it for each vllm_* GetMetrics and IsActive.
func scrapeCost(args []string) int {
	fs := flag.NewFlagSet("scrape-cost", flag.ExitOnError)
	url := fs.String("url", "", "the engine's /metrics URL")
	n := fs.Int("n", 1000, "scrapes measured")
	warmup := fs.Int("warmup", 50, "scrapes before measuring")
	_ = fs.Parse(args)
	client := vllm.NewClient(*url)
	var last vllm.EngineMetrics
	for i := 0; i < *warmup; i++ {
		if _, err := client.Scrape(); err != nil {
			fail("scrape: %v", err)
		}
	}
	walls := make([]float64, 0, *n)
	cpu0 := cpuSeconds()
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		m, err := client.Scrape()
		walls = append(walls, time.Since(t0).Seconds())
		if err != nil {
			fail("scrape: %v", err)
		}
		last = m
	}
	cpu := cpuSeconds() - cpu0
	line, _ := json.Marshal(map[string]any{
		"n":           *n,
		"cpu_seconds": cpu,
		"walls_s":     walls,
		"last":        last,
	})
	fmt.Println(string(line))
	return 0
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func newLogger(level string) *zap.Logger {
	cfg := zap.NewProductionConfig() // JSON to stderr, as the peer logs (its main: JSON, info by default)
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		fail("log level: %v", err)
	}
	cfg.Level = lvl
	cfg.Sampling = nil
	logger, err := cfg.Build()
	if err != nil {
		fail("logger: %v", err)
	}
	return logger
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "peer-scaler: "+format+"\n", args...)
	os.Exit(1)
}
