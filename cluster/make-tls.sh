#!/usr/bin/env bash
# Make the fleet's TLS files with a CA of its own (openssl; nothing fetched):
#   cluster/make-tls.sh OUT_DIR HOST [HOST...]
# HOSTs are the names and IP addresses clients and nodes use to reach any node (the inventory's
# 30 addresses, the Redis host, the API's DNS name); localhost and 127.0.0.1 are added.
# Writes, mode 0600 for keys:
#   OUT_DIR/ca.crt            the CA: give it to every node and to API clients (--ca-bundle)
#   OUT_DIR/ca.key            the CA's key: keep it on the admin machine, never on a node
#   OUT_DIR/node.crt, node.key  one certificate for every node, for server and client use: the
#                             ingress (https), Redis (TLS) and Ray's mutual TLS (RAY_USE_TLS)
# Install on each node: /etc/ocr/tls/{ca.crt,node.crt,node.key}, owned by the service user,
# node.key mode 0600. A site with its own PKI puts its own files at the same paths.
set -euo pipefail
out="${1:?usage: $0 OUT_DIR HOST [HOST...]}"
shift
if [[ $# -eq 0 ]]; then
  echo "error: name at least one host (DNS name or IP address) the nodes are reached by" >&2
  exit 2
fi
if [[ -e "$out/ca.key" ]]; then
  echo "error: $out/ca.key exists; a fleet keeps one CA (move it away first to start over)" >&2
  exit 1
fi
days="${OCR_TLS_DAYS:-825}"
umask 077
mkdir -p "$out"
sans="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then sans+=",IP:$host"; else sans+=",DNS:$host"; fi
done
openssl req -x509 -newkey rsa:3072 -sha256 -nodes -days "$days" -subj "/CN=OCR fleet CA" \
  -keyout "$out/ca.key" -out "$out/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey rsa:3072 -sha256 -nodes -subj "/CN=ocr-node" -keyout "$out/node.key" -out "$out/node.csr" 2>/dev/null
cat > "$out/node.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
EXT
openssl x509 -req -sha256 -days "$days" -in "$out/node.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
  -CAcreateserial -extfile "$out/node.ext" -out "$out/node.crt" 2>/dev/null
rm -f "$out/node.csr" "$out/node.ext" "$out/ca.srl"
chmod 600 "$out/ca.key" "$out/node.key"
chmod 644 "$out/ca.crt" "$out/node.crt"
echo "wrote $out/ca.crt, $out/node.crt and $out/node.key (for every node), $out/ca.key (keep it off the nodes)"
echo "names: $sans"
