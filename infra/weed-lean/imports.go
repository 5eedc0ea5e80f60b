// The plugins the lean weed links (infra/weed.py, LEAN_PLUGINS_KEPT): the filer's default
// store, leveldb2 in the filer's -dir, and the credential store of the S3 identities file.
// In place of weed/command/imports.go, which names every filer store SeaweedFS has.
package command

import (
	_ "github.com/seaweedfs/seaweedfs/weed/credential/filer_etc"
	_ "github.com/seaweedfs/seaweedfs/weed/filer/leveldb2"
)
