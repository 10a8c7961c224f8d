// Command etcd is the etcd server at the version k8s.io/kubernetes pins. etcd's own main module
// carries replace directives, so it cannot be built as a dependency; its etcdmain package can.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
