#!/usr/bin/env bash
# Runs one command next to a throwaway single-node Ceph RGW, then stops that Ceph:
#
#   deploy/ceph/with-ceph.sh .venv/bin/pytest tests
#
# 1. starts Ceph with start-ceph.sh in its own data folder and ports (defaults below differ
#    from start-ceph.sh's, so a developer's Ceph on the default ports keeps running),
# 2. runs the command with the RGW's S3 settings exported (S3_ENDPOINT_URL,
#    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, CEPH_CONF),
# 3. stops Ceph whatever happens (success, failure, Ctrl-C), and exits with the command's
#    status.
# Ceph's own start/stop messages go to $CEPH_LOG, so the command's output comes last.
#
# Env knobs (all passed on to start-ceph.sh / stop-ceph.sh):
#   CEPH_DIR        data folder, wiped on start and stop (default /tmp/lakegate-test-ceph)
#   CEPH_RGW_PORT   default 7490        CEPH_MON_PORT   default 40790
#   CEPH_MS_PORT_MIN / CEPH_MS_PORT_MAX  default 46900 / 46999
#   CEPH_RGW_INSTANCES  radosgw processes (default 1): S3_ENDPOINT_URLS names them all
#   CEPH_LOG        default $CEPH_DIR.log
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CEPH_DIR=${CEPH_DIR:-/tmp/lakegate-test-ceph}
export CEPH_RGW_PORT=${CEPH_RGW_PORT:-7490}
export CEPH_MON_PORT=${CEPH_MON_PORT:-40790}
export CEPH_MS_PORT_MIN=${CEPH_MS_PORT_MIN:-46900}
export CEPH_MS_PORT_MAX=${CEPH_MS_PORT_MAX:-46999}
CEPH_LOG=${CEPH_LOG:-${CEPH_DIR%/}.log}

[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

stop_ceph() { bash "$HERE/stop-ceph.sh" >>"$CEPH_LOG" 2>&1 || true; }

mkdir -p "$(dirname "$CEPH_LOG")"
: >"$CEPH_LOG"
# the folder is ours alone: daemons left by a run that was killed outright go first
stop_ceph
trap stop_ceph EXIT
# Ctrl-C or TERM while Ceph starts: leave (the EXIT trap stops it); while the command runs,
# the command sees the signal too, and its exit status is passed on
trap 'exit 130' INT
trap 'exit 143' TERM

if ! bash "$HERE/start-ceph.sh" >>"$CEPH_LOG" 2>&1; then
  echo "with-ceph: Ceph did not start; the end of $CEPH_LOG:" >&2
  tail -n 30 "$CEPH_LOG" >&2
  exit 1
fi
set -a
# shellcheck source=/dev/null
. "$CEPH_DIR/s3.env"
set +a

"$@"
status=$?
exit "$status"
