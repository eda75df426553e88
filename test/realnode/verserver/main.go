// Command verserver is the sample application of the real-node tests: a tiny
// HTTP server answering every request with its version and its pod's name
// ("v2 web-7d9f-abcde"), with a readiness endpoint and a graceful shutdown.
// GET /requests answers how many requests it answered so far (not counting
// /readyz and /requests): a test counts with it what a pod received, such
// as the copies a gateway mirrors to it, whose answers nobody reads.
//
// The version is set at build time (-ldflags "-X main.version=v2"). On
// SIGTERM it first reports not ready and keeps serving for -drain (so the
// endpoint leaves every load balancer before the listener closes), then
// drains open requests and exits 0.
//
// With -check URL it is instead a smoke test, as a Job check runs one: it
// sends -requests GET requests to URL and exits 0 when every one is
// answered 200 by version -want (any version when empty), 1 otherwise,
// printing each failure and a summary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

var version = "dev"

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	drain := flag.Duration("drain", 5*time.Second, "time to keep serving after SIGTERM, while reporting not ready")
	check := flag.String("check", "", "smoke-test this URL instead of serving")
	requests := flag.Int("requests", 20, "requests a check sends")
	want := flag.String("want", "", "version a check expects in every answer (X-Version); empty: any")
	flag.Parse()
	if *check != "" {
		os.Exit(smoke(*check, *requests, *want))
	}
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	var stopping atomic.Bool
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/requests", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, served.Load())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if stopping.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		w.Header().Set("X-Version", version)
		fmt.Fprintf(w, "%s %s\n", version, pod)
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		stopping.Store(true)
		log.Printf("%s %s: SIGTERM, draining for %s", version, pod, *drain)
		time.Sleep(*drain)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	log.Printf("verserver %s (%s) listening on %s", version, pod, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	log.Printf("%s %s: stopped", version, pod)
}

// smoke sends n requests to url and returns 0 when every one is answered
// 200 by version want (any when empty), else 1.
func smoke(url string, n int, want string) int {
	client := &http.Client{Timeout: 5 * time.Second}
	failed := 0
	for i := 0; i < n; i++ {
		resp, err := client.Get(url)
		switch {
		case err != nil:
			failed++
			fmt.Printf("request %d: %v\n", i+1, err)
		case resp.StatusCode != http.StatusOK:
			failed++
			fmt.Printf("request %d: %s\n", i+1, resp.Status)
		case want != "" && resp.Header.Get("X-Version") != want:
			failed++
			fmt.Printf("request %d: answered by version %q, want %q\n", i+1, resp.Header.Get("X-Version"), want)
		}
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("%d of %d requests to %s failed\n", failed, n, url)
	if failed > 0 {
		return 1
	}
	return 0
}
