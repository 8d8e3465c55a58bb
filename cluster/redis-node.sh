#!/usr/bin/env bash
# Start the fleet's job store in the foreground (for systemd, which restarts it): Debian's
# redis-server, carried in the offline bundle (apt-get download redis-server redis-tools).
#   cluster/redis-node.sh
# Closed by default: TLS only (no plaintext port) with the fleet's certificate, a password from
# a file, AOF on (accepted jobs survive a restart) and no eviction (an evicted chunk would lose a
# document; a full Redis answers OOM, which the service turns into 507). The configuration,
# password included, goes to redis-server on its stdin: never on disk, never in `ps`.
# OCR_* variables move the paths and the port (cluster/README.md, "Ports").
set -euo pipefail

tls_dir="${OCR_TLS_DIR:-/etc/ocr/tls}"
password_file="${OCR_REDIS_PASSWORD_FILE:-/etc/ocr/secrets/redis_password}"
data_dir="${OCR_REDIS_DIR:-/var/lib/ocr-redis}"
port="${OCR_REDIS_PORT:-6390}"
bind="${OCR_REDIS_BIND:-0.0.0.0}"
maxmemory="${OCR_REDIS_MAXMEMORY:-0}"   # bytes; 0: no cap but the machine's (set one: 507 instead of the OOM killer)

fail() { echo "error: $*" >&2; exit 1; }

[[ -r "$password_file" && -s "$password_file" ]] ||
  fail "no Redis password: $password_file is missing or empty (make one: python3 -c 'import secrets; print(secrets.token_hex(32))')"
mode="$(stat -c %a "$password_file")"
[[ "$mode" == "600" || "$mode" == "400" ]] || fail "$password_file has mode $mode; chmod 600 it"
for name in ca.crt node.crt node.key; do
  [[ -r "$tls_dir/$name" ]] || fail "no $tls_dir/$name: Redis serves TLS only (cluster/make-tls.sh makes the files)"
done
command -v redis-server >/dev/null || fail "redis-server is not installed (Debian's redis-server package, from the bundle)"
mkdir -p "$data_dir"
chmod 700 "$data_dir"

password="$(head -n1 "$password_file")"
exec redis-server - <<CONFIG
port 0
tls-port $port
bind $bind
protected-mode yes
tls-cert-file $tls_dir/node.crt
tls-key-file $tls_dir/node.key
tls-ca-cert-file $tls_dir/ca.crt
tls-auth-clients no
tls-protocols "TLSv1.2 TLSv1.3"
requirepass $password
dir $data_dir
appendonly yes
appendfsync everysec
save ""
maxmemory $maxmemory
maxmemory-policy noeviction
daemonize no
supervised no
logfile ""
CONFIG
