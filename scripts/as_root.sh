# Sourced by the other scripts: as_root CMD... runs CMD as root, directly when we are root (a
# fresh machine of this kind has no sudo) and through sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "$(basename "$0"): '$*' needs root, and sudo is not installed: run this as root" >&2
    return 1
  fi
}
