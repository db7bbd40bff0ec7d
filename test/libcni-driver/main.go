// libcni-driver: the integration tests' container runtime. It calls CNI
// plugins through libcni, the library containerd (go-cni), podman and cnitool
// use, so a network list runs as a real runtime runs it: one plugin after the
// other with the previous result, ADD results cached for CHECK and DEL.
//
// Usage, as cnitool's:
//
//	libcni-driver add|check|del NETWORK NETNS [CONTAINER_ID]
//
// NETWORK is the "name" of a .conflist (or .conf) in NETCONFPATH (default
// /etc/cni/net.d); plugins are looked up in CNI_PATH; CNI_IFNAME (default
// eth0), CNI_ARGS ("K=V;K2=V2") and CAP_ARGS (a JSON object of capability
// arguments, e.g. {"portMappings":[...]}) are passed on as libcni passes them.
// The container ID defaults to one derived from NETNS, as cnitool's does.
// ADD prints the result; any failure prints libcni's error on stderr, exit 1.
// Built by test/integration/global-setup.ts with Debian's golang-go and
// golang-github-appc-cni-dev (GO111MODULE=off, GOPATH=/usr/share/gocode).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "libcni-driver: "+format+"\n", args...)
	os.Exit(1)
}

func getenv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// cniArgs parses "K=V;K2=V2" into libcni's pairs.
func cniArgs(s string) [][2]string {
	var pairs [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fail("CNI_ARGS: %q is not K=V", kv)
		}
		pairs = append(pairs, [2]string{k, v})
	}
	return pairs
}

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 {
		fmt.Fprintln(os.Stderr, "usage: libcni-driver add|check|del NETWORK NETNS [CONTAINER_ID]")
		os.Exit(2)
	}
	command, network := os.Args[1], os.Args[2]
	netns, err := filepath.Abs(os.Args[3])
	if err != nil {
		fail("netns: %v", err)
	}
	list, err := libcni.LoadConfList(getenv("NETCONFPATH", "/etc/cni/net.d"), network)
	if err != nil {
		fail("network %q: %v", network, err)
	}
	sum := sha256.Sum256([]byte(netns))
	rt := &libcni.RuntimeConf{
		ContainerID: "libcni-driver-" + hex.EncodeToString(sum[:])[:16],
		NetNS:       netns,
		IfName:      getenv("CNI_IFNAME", "eth0"),
		Args:        cniArgs(os.Getenv("CNI_ARGS")),
	}
	if len(os.Args) == 5 {
		rt.ContainerID = os.Args[4]
	}
	if caps := os.Getenv("CAP_ARGS"); caps != "" {
		if err := json.Unmarshal([]byte(caps), &rt.CapabilityArgs); err != nil {
			fail("CAP_ARGS: %v", err)
		}
	}
	cni := libcni.NewCNIConfig(filepath.SplitList(os.Getenv("CNI_PATH")), nil)
	ctx := context.Background()
	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail("add: %v", err)
		}
		if err := result.Print(); err != nil {
			fail("printing the result: %v", err)
		}
	case "check":
		err = cni.CheckNetworkList(ctx, list, rt)
	case "del":
		err = cni.DelNetworkList(ctx, list, rt)
	default:
		fail("unknown command %q (add, check or del)", command)
	}
	if err != nil {
		fail("%s: %v", command, err)
	}
}
