# shellcheck shell=bash
# vlgrpo entrypoint mechanics: the process environment beyond VLGRPO_*.
#
# The entrypoints run as `#!/bin/bash -p`: privileged mode makes this bash ignore BASH_ENV, ENV,
# SHELLOPTS, BASHOPTS and functions exported in the environment (BASH_FUNC_name%%), which otherwise act
# before the first line of the script (a function named realpath or python3 replaces that command;
# SHELLOPTS=xtrace prints the W&B key; SHELLOPTS=noexec turns the launch into a silent exit 0). The
# fixed path /bin/bash also keeps PATH from choosing the shell.
#
# Every child (the preflight, verl, Ray and its workers, vLLM, CANN's scripts) still inherits the
# environment, so variables that make a child bash or Python run code named by the variable itself are
# refused (exit 2, one line each, values not shown):
#   BASH_FUNC_*%%                 exported shell functions (any child bash runs them instead of a command)
#   BASH_ENV                      a file every child bash runs first; only the image's own
#                                 $VG_IMAGE_BASH_ENV (docker/npu.Dockerfile: CANN's set_env) is accepted,
#                                 and this shell sources that fixed path itself (vg_image_env)
#   ENV, SHELLOPTS, BASHOPTS      start-up file / options of every child bash (xtrace, noexec, ...)
#   PYTHONSTARTUP, PYTHONINSPECT  interactive start-up file / a Python prompt after the program ends
#   PYTHONWARNINGS with a '.'     a dotted warning category makes every Python process import that module
#                                 (PYTHONWARNINGS=all:0:antigravity.x:0:0 with BROWSER set runs a command)
#   LD_PRELOAD, LD_AUDIT          a native library loaded into every process
#   RAY_*_HOOK, RAY_RUNTIME_ENV_PLUGINS, RAY_RUNTIME_ENV_PLUGIN_SCHEMAS
#                                 Ray 2.48.0 imports and calls the Python object they name
#   VLGRPO_<not an identifier>    unknown like any undeclared VLGRPO_ name, but invisible to compgen -e
#   RAY_JOB_CONFIG_JSON_ENV_VAR   (set by Ray's job supervisor for `ray job submit`) refused only when its
#     with a code-loading key     runtime_env installs or loads code in the driver's ray.init (Ray 2.48.0
#                                 _private/worker.py merges it): pip, conda, uv, py_modules, working_dir,
#                                 py_executable, worker_process_setup_hook, container, image_uri, java_jars.
#                                 Its env_vars are fine: Ray sets them in this process too, so they are
#                                 checked here like any other variable.
#   RAY_RUNTIME_ENV               the runtime_env of ray:// clients (no use for these launches)
#   VERL_FILE_LOGGER_PATH         verl 0.8.0's file logger (utils/tracking.py FileLogger) opens it "wb":
#                                 any file the launch can write (a shared volume) would be truncated
# An empty value counts as unset (as for VLGRPO_*).
#
# Passed through on purpose (documented decision): PATH, PYTHONPATH, LD_LIBRARY_PATH, NCCL_*/HCCL_*
# (plugins included), ASCEND_*, CUDA_*: the images and CANN's set_env set them, the Ray tests put the
# sitecustomize shim on PYTHONPATH, and abusing them needs a file the user placed on the machine, which
# such a user can run anyway. CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES lower the device count
# (lib/node.sh). HYDRA_FULL_ERROR, VERL_* (logging, tracker) and other RAY_* settings load no code.
#
# Shell variables bash itself takes from the environment and that change how this script runs are
# cleared here, when the library is sourced and before any function runs (not refused: TMOUT is often
# exported by login profiles): TMOUT (a read timeout: a `while read` loop over the environment or the
# VLGRPO_ names would end early and skip checks), BASH_COMPAT (compatibility level 31 changes regular
# expressions: the argv kept its {NAME} placeholders), FUNCNEST (aborts the checks half-way).
unset TMOUT BASH_COMPAT FUNCNEST

# Test hook (like those of lib/node.sh): VG_ENVIRON_FILE is a plain shell variable, never read from the
# environment.
VG_ENVIRON_FILE=/proc/$$/environ
readonly VG_IMAGE_BASH_ENV=/opt/vlgrpo/image/cann-env.sh
readonly VG_RAY_CODE_KEYS='"(pip|conda|uv|py_modules|working_dir|py_executable|worker_process_setup_hook|container|image_uri|java_jars)"[[:space:]]*:'

# vg_image_env — what BASH_ENV did for the image before `bash -p`: source the image's own CANN
# environment file (a fixed path) when the image points BASH_ENV at it. Called before the ERR trap is
# set (CANN's scripts run commands that fail).
vg_image_env() {
  if [[ ${BASH_ENV-} == "$VG_IMAGE_BASH_ENV" && -f $VG_IMAGE_BASH_ENV ]]; then
    # shellcheck source=docker/image/cann-env.sh
    source "$VG_IMAGE_BASH_ENV"
  fi
  return 0
}

# vg_check_environment — record a problem for each refused variable of this process's environment as
# it was at exec (VG_ENVIRON_FILE), including names bash cannot hold (BASH_FUNC_name%%).
vg_check_environment() {
  local e name val why fix
  if [[ ! -r $VG_ENVIRON_FILE ]]; then
    vg_problem environment "$VG_ENVIRON_FILE is unreadable, so the inherited environment cannot be checked" \
      "run with /proc mounted (the default for docker and podman)"
    return 0
  fi
  while IFS= read -r -d '' e || [[ -n $e ]]; do
    name=${e%%=*} val=${e#*=} why="" fix="unset it for the launch"
    # a VLGRPO_ name bash cannot hold escapes vg_check_unknown_vars (compgen -e) yet reaches Python
    if [[ $name == VLGRPO_* && ! $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      vg_problem "$(vg_show "$name")" "not a setting (not even a valid variable name)" "unset it (--help lists the settings)"
      continue
    fi
    [[ -n $val ]] || continue
    case $name in
      BASH_FUNC_*)
        why="an exported shell function: every bash the launch starts would run it in place of the command of that name"
        fix="unset it before the launch (export -fn NAME; Lmod: unset -f module ml; Slurm: --export=NONE or a list)"
        ;;
      BASH_ENV)
        [[ $val == "$VG_IMAGE_BASH_ENV" ]] ||
          why="names a file every bash of the launch would run first (only the image's own $VG_IMAGE_BASH_ENV is accepted)"
        ;;
      ENV | SHELLOPTS | BASHOPTS) why="sets the start-up file or options of every bash of the launch (xtrace prints secrets, noexec skips commands)" ;;
      PYTHONSTARTUP | PYTHONINSPECT) why="makes Python run a start-up file or open a prompt after the program (code the launch did not choose)" ;;
      PYTHONWARNINGS)
        if [[ $val == *.* ]]; then
          why="has a dotted warning category, which makes every Python process import that module"
          fix="use built-in categories only (e.g. ignore::DeprecationWarning), or unset it"
        fi
        ;;
      LD_PRELOAD | LD_AUDIT)
        why="loads a native library into every process of the launch"
        fix="unset it (a preload the image needs belongs in the image)"
        ;;
      RAY_*_HOOK | RAY_RUNTIME_ENV_PLUGINS | RAY_RUNTIME_ENV_PLUGIN_SCHEMAS) why="Ray imports and calls the Python object it names" ;;
      RAY_JOB_CONFIG_JSON_ENV_VAR)
        if [[ $val =~ $VG_RAY_CODE_KEYS ]]; then
          why="a Ray job runtime_env with ${BASH_REMATCH[1]}, which installs or loads code in every worker of the launch"
          fix="submit the job without pip, conda, uv, py_modules, working_dir, py_executable, worker_process_setup_hook, container, image_uri or java_jars (the image holds the code)"
        fi
        ;;
      RAY_RUNTIME_ENV) why="a runtime_env for ray:// clients, which can install or load code in the workers" ;;
      VERL_FILE_LOGGER_PATH)
        why="verl's file logger opens this path for writing with truncation, whatever file it names"
        fix="unset it; the file logger then writes <VERL_FILE_LOGGER_ROOT or the working directory>/<project>/<experiment>.jsonl"
        ;;
    esac
    if [[ -n $why ]]; then
      vg_problem "$(vg_show "$name")" "$why (value not shown)" "$fix"
    fi
  done <"$VG_ENVIRON_FILE"
  return 0
}
