// The pod sandbox's process: it holds the namespaces until it is told to stop.
//
// `pause wait-for-dns NAME TRIES` instead resolves NAME (every 2 s, at most TRIES times) and exits 0
// once it resolves: the training operator's init container for PyTorchJob workers, which must wait
// for the master's Service name, run from an image that is on the node and meets Pod Security
// "restricted" (cluster/components.py gives the operator that template).
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func waitForDNS(name string, tries int) int {
	for i := 0; i < tries; i++ {
		if _, err := net.LookupHost(name); err == nil {
			return 0
		}
		fmt.Fprintf(os.Stderr, "waiting for %s to resolve\n", name)
		time.Sleep(2 * time.Second)
	}
	return 1
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == "wait-for-dns" {
		tries, err := strconv.Atoi(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: pause wait-for-dns NAME TRIES")
			os.Exit(2)
		}
		os.Exit(waitForDNS(os.Args[2], tries))
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
