package acpserver

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster"
)

// envClusterSecret authenticates the pods of a cluster to each other.
const envClusterSecret = "IAC_CODE_CLUSTER_SECRET"

// checkCluster refuses a cluster configuration that cannot work, before
// anything starts: cluster mode serves HTTP, shares its sessions through
// PostgreSQL and authenticates its pods.
func checkCluster(transport, listen, advertise string, getenv func(string) string) error {
	if listen == "" {
		if advertise != "" {
			return errors.New("--advertise (IAC_CODE_CLUSTER_ADVERTISE) needs --cluster-listen (IAC_CODE_CLUSTER_LISTEN)")
		}
		return nil
	}
	if transport != "http" {
		return errors.New("cluster mode (--cluster-listen, IAC_CODE_CLUSTER_LISTEN) needs --transport http")
	}
	if url := getenv(store.EnvStoreURL); !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return fmt.Errorf("cluster mode needs a session store shared by every pod: set %s=postgres://… (the file store is local to one machine)", store.EnvStoreURL)
	}
	if getenv(envClusterSecret) == "" {
		return fmt.Errorf("cluster mode needs the cluster secret: set %s to the same random value on every pod (pods without it are refused)", envClusterSecret)
	}
	return nil
}

// joinCluster makes this process a pod, on the PostgreSQL store checkCluster
// asked for.
func joinCluster(srv *actors.Server, sessions store.Backend, listen, advertise string, log zerolog.Logger) (*cluster.Node, error) {
	pg, ok := sessions.(*store.PGStore)
	if !ok {
		return nil, fmt.Errorf("cluster mode needs the PostgreSQL store (%s)", store.EnvStoreURL)
	}
	// The actor tree pauses and resumes turns once it can (issue 29, lane
	// resume): until then a drain hands nothing over and nothing is
	// adopted, as before.
	turns, _ := any(srv).(cluster.Turns)
	if turns == nil {
		log.Warn().Msg("cluster: this build cannot hand running turns over: SIGTERM cancels them")
	}
	return cluster.Start(srv, pg, cluster.Config{Listen: listen, Advertise: advertise, Secret: os.Getenv(envClusterSecret), Log: log,
		Turns: turns})
}
