# shellcheck shell=sh
# CANN's environment for every non-interactive bash in the Ascend image (ENV BASH_ENV points here;
# docker/npu.Dockerfile). The vendor base only adds CANN's set_env.sh to ~/.bashrc, which the entrypoints
# (non-interactive) never read. The files to source are listed in /opt/vlgrpo/cann-set-env.list at build
# time; missing ones are skipped (python3 -m vlgrpo doctor reports a missing CANN). The caller's -e / -u
# are suspended while CANN's scripts run (they reference unset variables) and restored afterwards.
if [ -r /opt/vlgrpo/cann-set-env.list ]; then
  _vlgrpo_opts=$-
  set +e +u
  while IFS= read -r _vlgrpo_f; do
    # shellcheck source=/dev/null
    if [ -n "$_vlgrpo_f" ] && [ -f "$_vlgrpo_f" ]; then . "$_vlgrpo_f"; fi
  done </opt/vlgrpo/cann-set-env.list
  case $_vlgrpo_opts in *e*) set -e ;; esac
  case $_vlgrpo_opts in *u*) set -u ;; esac
  unset _vlgrpo_f _vlgrpo_opts
fi
