#!/usr/bin/env bash
# The file tools against their peers, in one run on loopback:
#   a 2 GiB file to /dev/null:   wirespeed send/recv  vs  nc
#   a 2 GiB file to tmpfs:       wirespeed cp (over ssh)  vs  scp and a local cp;
#                                wirespeed cp with both ends local  vs  a local cp
#   10,000 files of 4 KiB:       wirespeed cp -r  vs  rsync -a, both over ssh and both local,
#                                from the page cache, and (as root) locally from disk;
#                                and how long ssh itself takes to run a command (its floor);
#                                the same tree again, unchanged: cp -r --sync  vs  rsync -a
# Remote ends go through a throwaway sshd on 127.0.0.1 (keys made here, nothing else touched).
# Every figure is the median of RUNS runs (default 3), taken in rounds of every command once, so
# that drift of this shared machine hits ours and the peers' alike; MB = 10^6 bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BIN:-target/release/wirespeed}")
RUNS=${RUNS:-3}
SIZE=${SIZE:-2147483648}
FILES=${FILES:-10000}
WORK=$(mktemp -d /tmp/wirespeed-tools.XXXXXX)
DST=$(mktemp -d /dev/shm/wirespeed-tools.XXXXXX)
KEPT=$(mktemp -d /dev/shm/wirespeed-sync.XXXXXX) # copies that re-syncs find unchanged
export WIRESPEED_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
cleanup() {
  [ -n "${SSHD_PID:-}" ] && kill "$SSHD_PID" 2>/dev/null || true
  rm -rf "$WORK" "$DST" "$KEPT"
}
trap cleanup EXIT

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- a throwaway sshd on 127.0.0.1 ---
ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/user_key"
cp "$WORK/user_key.pub" "$WORK/authorized_keys"
SSH_PORT=$(free_port)
cat >"$WORK/sshd_config" <<CONF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $WORK/host_key
AuthorizedKeysFile $WORK/authorized_keys
PidFile $WORK/sshd.pid
StrictModes no
UsePAM no
PermitRootLogin yes
PasswordAuthentication no
Subsystem sftp internal-sftp
CONF
mkdir -p /run/sshd
/usr/sbin/sshd -D -f "$WORK/sshd_config" 2>/dev/null &
SSHD_PID=$!
SSH_OPTS="-F /dev/null -i $WORK/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
for _ in $(seq 50); do ssh $SSH_OPTS -p "$SSH_PORT" 127.0.0.1 true 2>/dev/null && break; sleep 0.1; done

# --- inputs ---
head -c "$SIZE" /dev/urandom >"$WORK/big"
mkdir -p "$WORK/tree"
python3 - "$WORK/tree" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 100:03}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05}"), "wb") as f:
        f.write(os.urandom(4096))
PY

timed() { # command... -> seconds
  local t0 t1
  t0=$(now); "$@" >/dev/null 2>&1; t1=$(now)
  python3 -c "print($t1 - $t0)"
}
fresh() { rm -rf "${DST:?}"/*; sync; }
# This VM hands idle page cache back to its host within seconds, so a tree read a moment ago is
# partly on disk again. The tree rows read it just before (warm), or drop the page cache first
# (cold, root only), so that every tool starts from the same place.
warm() { find "$1" -type f -exec cat {} + >/dev/null; }
cold() { sync; echo 1 >/proc/sys/vm/drop_caches; }

ws_send_null() { # transport
  local port; port=$(free_port)
  "$BIN" recv --listen "127.0.0.1:$port" /dev/null 2>/dev/null &
  local r=$!; sleep 0.3
  timed "$BIN" send "127.0.0.1:$port" "$WORK/big" --transport "$1"
  wait "$r"
}
nc_null() {
  local port; port=$(free_port)
  nc -l -p "$port" >/dev/null &
  local r=$!; sleep 0.3
  timed nc -N 127.0.0.1 "$port" <"$WORK/big"
  wait "$r"
}
ws_cp() { # transport src [flags]
  fresh
  timed "$BIN" cp -e "ssh $SSH_OPTS -p $SSH_PORT" --remote-bin "$BIN" --transport "$1" "${@:3}" "$2" "127.0.0.1:$DST/"
}
scp_cp() { fresh; timed scp -q $SSH_OPTS -P "$SSH_PORT" "$1" "127.0.0.1:$DST/"; }
local_cp() { fresh; timed cp "$1" "$DST/"; }
rsync_remote() { fresh; warm "$1"; timed rsync -a -e "ssh $SSH_OPTS -p $SSH_PORT" "$1" "127.0.0.1:$DST/"; }
rsync_local() { fresh; warm "$1"; timed rsync -a "$1" "$DST/"; }
ws_local() { fresh; [ -d "$1" ] && warm "$1"; timed "$BIN" cp -r "$1" "$DST/"; }
ws_tree() { fresh; warm "$1"; timed "$BIN" cp -r -e "ssh $SSH_OPTS -p $SSH_PORT" --remote-bin "$BIN" "$1" "127.0.0.1:$DST/"; }
rsync_local_cold() { fresh; cold; timed rsync -a "$1" "$DST/"; }
ws_local_cold() { fresh; cold; timed "$BIN" cp -r "$1" "$DST/"; }
ssh_true() { timed ssh $SSH_OPTS -p "$SSH_PORT" 127.0.0.1 true; }
# Re-syncs of the unchanged tree into copies made once, below.
ws_resync() { timed "$BIN" cp -r --sync -e "ssh $SSH_OPTS -p $SSH_PORT" --remote-bin "$BIN" "$1" "127.0.0.1:$KEPT/ws/"; }
rsync_resync() { timed rsync -a -e "ssh $SSH_OPTS -p $SSH_PORT" "$1" "127.0.0.1:$KEPT/rs/"; }
ws_resync_local() { timed "$BIN" cp -r --sync "$1" "$KEPT/ws/"; }
rsync_resync_local() { timed rsync -a "$1" "$KEPT/rs/"; }

rows=()
row() { # case, ours(s), peer name, peer(s), bytes, target
  rows+=("$(python3 -c '
import sys
case, ours, peer, theirs, n, target = sys.argv[1:]
o, t, n = float(ours), float(theirs), float(n)
print(f"| {case} | {n/o/1e6:.0f} | {peer} | {n/t/1e6:.0f} | {t/o:.2f} | {target} |")' "$@")")
}

# Every command once per round, RUNS rounds, so that drift of this shared machine hits ours and
# the peers' alike; each figure is the median of its RUNS times.
commands=(
  "nc_null" "ws_send_null auto" "ws_send_null tcp"
  "scp_cp $WORK/big" "local_cp $WORK/big" "ws_cp auto $WORK/big" "ws_cp tcp $WORK/big" "ws_local $WORK/big"
  "rsync_remote $WORK/tree" "ws_tree $WORK/tree" "rsync_local $WORK/tree" "ws_local $WORK/tree"
  "ssh_true"
  "rsync_resync $WORK/tree" "ws_resync $WORK/tree" "rsync_resync_local $WORK/tree" "ws_resync_local $WORK/tree"
)
[ -w /proc/sys/vm/drop_caches ] && commands+=("rsync_local_cold $WORK/tree" "ws_local_cold $WORK/tree")
mkdir -p "$KEPT/ws" "$KEPT/rs"
"$BIN" cp -r --sync "$WORK/tree" "$KEPT/ws/" 2>/dev/null
rsync -a "$WORK/tree" "$KEPT/rs/"
declare -A took=()
tree_bytes=$(( FILES * 4096 ))
echo "measuring (RUNS=$RUNS, file $SIZE bytes, tree $FILES files)..." >&2
for _ in $(seq "$RUNS"); do
  for c in "${commands[@]}"; do took[$c]+="$(eval "$c") "; done
done
med() { median ${took[$1]}; }

row "send → /dev/null, auto (shm)" "$(med "ws_send_null auto")" "nc" "$(med nc_null)" "$SIZE" "≥ 2"
row "send → /dev/null, tcp" "$(med "ws_send_null tcp")" "nc" "$(med nc_null)" "$SIZE" "≥ 2"
row "cp 2 GiB → tmpfs, over ssh, auto (shm)" "$(med "ws_cp auto $WORK/big")" "scp" "$(med "scp_cp $WORK/big")" "$SIZE" "≥ 4"
row "cp 2 GiB → tmpfs, over ssh, auto (shm)" "$(med "ws_cp auto $WORK/big")" "local cp" "$(med "local_cp $WORK/big")" "$SIZE" "≥ 0.8"
row "cp 2 GiB → tmpfs, over ssh, tcp" "$(med "ws_cp tcp $WORK/big")" "scp" "$(med "scp_cp $WORK/big")" "$SIZE" "≥ 4"
row "cp 2 GiB → tmpfs, both ends local (one process)" "$(med "ws_local $WORK/big")" "local cp" "$(med "local_cp $WORK/big")" "$SIZE" "≥ 0.8"
row "cp -r $FILES × 4 KiB → tmpfs, over ssh" "$(med "ws_tree $WORK/tree")" "rsync -a (ssh)" \
  "$(med "rsync_remote $WORK/tree")" "$tree_bytes" "≥ 3"
row "cp -r $FILES × 4 KiB → tmpfs, local" "$(med "ws_local $WORK/tree")" "rsync -a (local)" \
  "$(med "rsync_local $WORK/tree")" "$tree_bytes" "≥ 3"
[ -n "${took["ws_local_cold $WORK/tree"]:-}" ] &&
  row "cp -r $FILES × 4 KiB → tmpfs, local, page cache dropped" "$(med "ws_local_cold $WORK/tree")" \
    "rsync -a (local)" "$(med "rsync_local_cold $WORK/tree")" "$tree_bytes" "—"
row "cp -r --sync, unchanged tree, over ssh" "$(med "ws_resync $WORK/tree")" "rsync -a (ssh)" \
  "$(med "rsync_resync $WORK/tree")" "$tree_bytes" "—"
row "cp -r --sync, unchanged tree, local" "$(med "ws_resync_local $WORK/tree")" "rsync -a (local)" \
  "$(med "rsync_resync_local $WORK/tree")" "$tree_bytes" "—"
ssh_s=$(med ssh_true)

echo "| case | wirespeed MB/s | peer | peer MB/s | ratio | target |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "ssh start-up (\`ssh 127.0.0.1 true\`): $(python3 -c "print(f'{$ssh_s:.2f}')") s, in every over-ssh tree row"
