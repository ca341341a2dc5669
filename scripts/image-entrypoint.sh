#!/bin/sh
# svc-router inside the image (README "Deploy as a sidecar"). The commands that read a config take
# /etc/svc-router/config.yaml unless one is named; SVC_* environment variables override it as everywhere.
case "${1:-}" in
  serve|accounts|mgmt-keys|api-keys)
    case " $* " in
      *" --config "*|*" --config="*|*" -c "*) ;;
      *) cmd=$1; shift; set -- "$cmd" --config /etc/svc-router/config.yaml "$@" ;;
    esac ;;
esac
exec /usr/local/bin/node /opt/svc-router/dist/src/cli.js "$@"
