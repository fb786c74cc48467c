# Helpers the local-fleet benchmarks share (sourced, not run): free loopback ports, waiting for a
# listener, and stopping what a script started. The sourcing script sets `logs_dir` (named when
# a listener never comes up) and adds pids to `servers` (nats-server, s3s-fs: stopped at exit)
# and `fleet` (coordinators and workers: stopped by `stop_fleet`, and at exit).
servers=()
fleet=()
stop_fleet() {
  if ((${#fleet[@]})); then
    kill "${fleet[@]}" 2>/dev/null || true
    wait "${fleet[@]}" 2>/dev/null || true
  fi
  fleet=()
}
stop_all() {
  stop_fleet
  if ((${#servers[@]})); then kill "${servers[@]}" 2>/dev/null || true; fi
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1 after 30 s; logs in ${logs_dir:-?}" >&2
  exit 2
}
