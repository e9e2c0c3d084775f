#!/bin/sh
# Makes a private CA and one certificate per dtrain identity, for mutual TLS.
#
# usage: scripts/make_certs.sh DIR [HOST...]
#   HOSTs (default: localhost 127.0.0.1) go into every certificate as SANs
#   (IP addresses as IP SANs, names as DNS SANs): a client checks the host of
#   the ps address it dials against them. WORKERS (default 4) and PS
#   (default 4) say how many worker:N (N = 1..WORKERS-1) and ps:N
#   (N = 0..PS-1) certificates to make; DAYS (default 365) their validity.
#
# DIR gets ca.pem and ca-key.pem (keep the key offline in production), and
# for each identity NAME in chief, worker:N, ps:N, tool the files
# NAME.pem and NAME-key.pem with ':' written '-' (worker-1.pem). The
# identity is the certificate's CN and also a URI SAN ("worker:1"). An
# existing CA in DIR is reused, so running again adds or renews
# certificates that the running cluster still trusts.
set -eu

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '4,16s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
DIR=$1
shift
[ $# -eq 0 ] && set -- localhost 127.0.0.1
WORKERS=${WORKERS:-4}
PS=${PS:-4}
DAYS=${DAYS:-365}
command -v openssl >/dev/null || { echo "make_certs: openssl not found (scripts/install_deps.sh)" >&2; exit 1; }

mkdir -p "$DIR"
umask 077

SAN=""
for h in "$@"; do
    case "$h" in
        *[!0-9.]*|'') case "$h" in *:*) SAN="$SAN,IP:$h" ;; *) SAN="$SAN,DNS:$h" ;; esac ;;
        *) SAN="$SAN,IP:$h" ;;
    esac
done

# P-256 keys: small and fast to handshake; every TLS stack takes them.
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f "$DIR/ca.pem" ] || [ ! -f "$DIR/ca-key.pem" ]; then
    newkey "$DIR/ca-key.pem"
    openssl req -x509 -new -key "$DIR/ca-key.pem" -out "$DIR/ca.pem" -days $((DAYS > 0 ? DAYS * 2 : 1)) \
        -subj "/CN=dtrain cluster CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# cert IDENTITY: NAME.pem and NAME-key.pem signed by the CA.
cert() {
    file=$(echo "$1" | tr ':' '-')
    ext=$DIR/.$file.ext
    printf '%s\n' \
        "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth,clientAuth" \
        "subjectAltName=URI:$1$SAN" >"$ext"
    newkey "$DIR/$file-key.pem"
    openssl req -new -key "$DIR/$file-key.pem" -subj "/CN=$1" -out "$DIR/$file.csr" 2>/dev/null
    openssl x509 -req -in "$DIR/$file.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca-key.pem" \
        -CAcreateserial -CAserial "$DIR/ca.srl" -days "$DAYS" -extfile "$ext" \
        -out "$DIR/$file.pem" 2>/dev/null
    rm -f "$DIR/$file.csr" "$ext"
}

cert chief
cert tool
i=1
while [ "$i" -lt "$WORKERS" ]; do cert "worker:$i"; i=$((i + 1)); done
i=0
while [ "$i" -lt "$PS" ]; do cert "ps:$i"; i=$((i + 1)); done
chmod 644 "$DIR"/*.pem
chmod 600 "$DIR"/*-key.pem
echo "make_certs: CA and certificates for chief, tool, worker:1..$((WORKERS - 1)), ps:0..$((PS - 1)) in $DIR (SANs:$(echo "$SAN" | tr ',' ' '))" >&2
