#!/bin/sh
# as_host.sh PER_HOST CMD...: run CMD (one MPI rank) in a UTS namespace of its own whose host name
# is hosta for world ranks 0 .. PER_HOST-1, hostb for the next PER_HOST, and so on, so that
# ranks on one machine see the host names they would on several (test_two_hosts.sh).
per=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:?as_host.sh: not started by mpirun}}
name=host$(printf "\\$(printf '%03o' $((97 + rank / per)))")
exec unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
