// The lean weed: SeaweedFS's own main (weed/weed.go) cut down to what gridledger's object
// store runs, `weed server` with its master, volume server, filer and S3 gateway
// (infra/seaweedfs.py). infra/weed.py builds it from the pinned module with this file in
// place of weed/weed.go, weed/command holding only the files those commands need and
// imports.go naming only the filer store they use (infra/weed-lean/imports.go), so the
// compile leaves out the other stores, the remote storages, mount, shell, admin and the
// message queue gateways.
package main

import (
	"embed"
	"fmt"
	"io/fs"
	"os"

	"github.com/seaweedfs/seaweedfs/weed/command"
	"github.com/seaweedfs/seaweedfs/weed/glog"
	weed_server "github.com/seaweedfs/seaweedfs/weed/server"
	"github.com/seaweedfs/seaweedfs/weed/util"
	flag "github.com/seaweedfs/seaweedfs/weed/util/fla9"
	util_http "github.com/seaweedfs/seaweedfs/weed/util/http"
)

//go:embed static
var static embed.FS

func init() {
	weed_server.StaticFS, _ = fs.Sub(static, "static")
	flag.Var(&util.ConfigurationFileDirectory, "config_dir", "directory with toml configuration files")
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: weed [logging options] command [arguments]\n\nThe commands are:\n")
	for _, cmd := range command.Commands {
		fmt.Fprintf(os.Stderr, "    %-11s %s\n", cmd.Name(), cmd.Short)
	}
	fmt.Fprintf(os.Stderr, "\nThe logging options are:\n")
	flag.PrintDefaults()
	os.Exit(2)
}

func main() {
	glog.MaxSize = 1024 * 1024 * 10
	glog.MaxFileCount = 5
	flag.Usage = usage
	flag.Parse()
	args := flag.Args()
	if len(args) < 1 {
		usage()
	}
	for _, cmd := range command.Commands {
		if cmd.Name() != args[0] || cmd.Run == nil {
			continue
		}
		util_http.InitGlobalHttpClient()
		cmd.Flag.Usage = func() { cmd.Usage() }
		_ = cmd.Flag.Parse(args[1:])
		status := 0
		if !cmd.Run(cmd, cmd.Flag.Args()) {
			cmd.Flag.Usage()
			status = 1
		}
		if s := command.CommandExitStatus(); s > status {
			status = s
		}
		os.Exit(status)
	}
	fmt.Fprintf(os.Stderr, "weed: unknown subcommand %q: this lean build (infra/weed.py) has only", args[0])
	for _, cmd := range command.Commands {
		fmt.Fprintf(os.Stderr, " %s", cmd.Name())
	}
	fmt.Fprintf(os.Stderr, "\n")
	os.Exit(2)
}
