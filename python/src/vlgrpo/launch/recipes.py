"""The recipe step of a launch: derived defaults, the cross-field rules of each recipe, its topology and its argv.

A recipe is data: ``vlgrpo/recipes/<entrypoint>.argv`` (next to the registry; in the images a copy in the
entrypoints' ``lib/recipes/``) holds the program, the Hydra overrides in upstream order with ``{NAME}`` placeholders
for settings and ``{name}`` ones for values derived here, and the recipe's words for ``--help`` (``#: KEY: TEXT``
lines: ``summary``, ``program``, ``derived``, ``fixed``), read by :func:`load` for the launch
(:mod:`vlgrpo.launch.entry`), its ``--help`` (:mod:`vlgrpo.launch.help`) and the overrides check.

The rules (each written once, here): the derived defaults of the registry's ``@function:description`` defaults
(:data:`FORMULAS`; a default whose input has no value has none either, and a derived value out of range is reported
with the inputs it came from), the per-node device counts against this node's, the length budget (field case B09),
the data-parallel and FSDP divisibility verl asserts, the vLLM replica layout, the resume folder (a
``global_step_N`` folder, outside the checkpoint folder only with a manifest: field case C03), the checkpoint
folder's storage (writable; in a container a volume mount of its own), and for the fully-async recipe the DAPO
overlong buffer. Problems are lines ``VAR: FAULT; fix: FIX`` (exit 2 at the entrypoint).

Upstream sources the rules mirror: verl v0.8.0 (commit 7aed6b2) ``verl/workers/config/actor.py`` (max_token_len >=
sequence length, mini-batch divisibility), ``verl/trainer/ppo/ray_trainer.py`` ``validate_config`` (train batch x n
divisible by the world size), ``verl/workers/rollout/replica.py`` (a replica inside one node or whole nodes),
``verl/workers/config/rollout.py`` (expert parallel 1 or TP x DP), ``verl/trainer/ppo/ray_trainer.py`` resume (the
``global_step_`` folder name).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from vlgrpo import environment, mounts
from vlgrpo.launch import settings

#: the recipe file of each recipe owner
FILES = {"fa": "fully-async-grpo.argv", "vo": "veomni-grpo.argv"}


class Recipe:
    """A recipe file, read: ``program`` (argv words), ``template`` (elements), ``summary``, ``fixed`` (the note on
    keys no setting reaches), ``derived`` (internal name -> description)."""

    def __init__(self) -> None:
        self.program: list[str] = []
        self.template: list[str] = []
        self.summary = ""
        self.fixed = ""
        self.derived: dict[str, str] = {}


def path(owner: str) -> str:
    """The recipe file of ``owner``, beside the registry in use (:data:`vlgrpo.environment.PATH`)."""
    return os.path.join(os.path.dirname(environment.PATH), "recipes", FILES[owner])


def load(owner: str) -> Recipe:
    """Read ``owner``'s recipe file. Raises OSError when it cannot be read, ValueError for a malformed one."""
    out = Recipe()
    with open(path(owner), encoding="utf-8") as fh:
        for line in fh.read().split("\n"):
            if line.startswith("#: "):
                key, sep, text = line[3:].partition(": ")
                if not sep:
                    raise ValueError(f"{path(owner)}: {line!r} is not '#: KEY: TEXT'")
                if key == "program":
                    out.program = text.split(" ")
                elif key == "derived":
                    name, _, desc = text.partition(": ")
                    out.derived[name] = desc
                elif key in ("summary", "fixed"):
                    setattr(out, key, text)
                else:
                    raise ValueError(f"{path(owner)}: unknown key {key!r}")
            elif line and not line.startswith("#"):
                out.template.append(line)
    if len(out.program) < 3 or not out.template:
        raise ValueError(f"{path(owner)}: no program or no template")
    return out


# ---- derived defaults -------------------------------------------------------------------------------------------

Values = dict[str, str]


def _node_devices(v: Values, node: int) -> str:
    return str(node) if node > 0 else ""


#: the registry's derived defaults: function name -> (the settings it reads, in order; the formula)
FORMULAS: dict[str, tuple[tuple[str, ...], Callable[[Values, int], str]]] = {
    "vg_default_node_devices": ((), _node_devices),
    "fa_default_token_len": (
        ("MAX_PROMPT_LENGTH", "MAX_RESPONSE_LENGTH"),
        lambda v, n: str((int(v["MAX_PROMPT_LENGTH"]) + int(v["MAX_RESPONSE_LENGTH"])) // 4),
    ),
    "fa_default_fsdp": (
        ("TRAINER_NNODES", "TRAINER_DEVICES_PER_NODE"),
        lambda v, n: str(int(v["TRAINER_NNODES"]) * int(v["TRAINER_DEVICES_PER_NODE"])),
    ),
    "fa_default_ep": (("ROLLOUT_TP",), lambda v, n: v["ROLLOUT_TP"]),
    "vo_default_fsdp": (
        ("TRAINER_NNODES", "TRAINER_DEVICES_PER_NODE", "SP_SIZE"),
        lambda v, n: str(int(v["TRAINER_NNODES"]) * int(v["TRAINER_DEVICES_PER_NODE"]) // int(v["SP_SIZE"])),
    ),
    "vo_default_experiment": (("TRAINER_DEVICES_PER_NODE",), lambda v, n: f"grpo-{v['TRAINER_DEVICES_PER_NODE']}gpu"),
}


class State:
    """The launch's values as the recipe step sees and changes them: ``values`` (short name -> Hydra text, internal
    lower-case names too), ``raw`` and ``source`` (as the settings step gave them), ``platform``, ``node`` (this
    node's device count, or the planning override's; 0 for none) and ``node_from`` (how it was found)."""

    def __init__(self) -> None:
        self.values: Values = {}
        self.raw: Values = {}
        self.source: Values = {}
        self.platform = ""
        self.node = 0
        self.node_from = ""
        self.problems: list[str] = []
        self.topology = ""
        self.cluster = (0, 0, 0)  # nodes, devices per node, devices
        self.notes: list[str] = []
        self.markers: list[str] = []  # container marker files (a test hook of vlgrpo.launch.entry)
        self.mountinfo = mounts.MOUNTINFO
        self.dry_run = False


def resolve_derived(owner: str, st: State, cwd: str) -> None:
    """Fill in each setting left to a derived default (registry default ``@function:description``), in --help
    order, each taken as it is for the ones after it; every value is then checked like user input
    (:func:`vlgrpo.launch.settings.check_derived`) and a value whose input was refused is dropped with it. Then a
    per-node count left without a value (no accelerator here, cluster mode) is a problem (not one whose derived
    value was refused: that refusal says why)."""
    rows = settings.owner_settings(owner)
    computed: list[tuple[str, tuple[str, ...], str, str]] = []
    for row in rows:
        short = row.name[len("VLGRPO_") :]
        if st.source.get(short) != "derived":
            continue
        fn = row.default[1:].partition(":")[0]
        if not fn:
            continue  # determined by the entrypoint itself (PLATFORM)
        if fn not in FORMULAS:
            raise ValueError(f"{row.name}: the registry names the derived default {fn!r}, which has no formula")
        inputs, formula = FORMULAS[fn]
        if any(not st.values.get(i) for i in inputs):
            continue
        raw = formula(st.values, st.node)
        if not raw:
            st.values[short] = ""
            continue
        st.raw[short] = st.values[short] = raw
        words = []
        for i in inputs:
            word = f"VLGRPO_{i}={st.values[i]}"
            if st.source.get(i) == "derived":
                irow = next(r for r in rows if r.name == "VLGRPO_" + i)
                word += f" ({irow.default.partition(':')[2]})"
            words.append(word)
        computed.append((short, inputs, raw, ", ".join(words)))
    gone: set[str] = set()
    checked = [settings.check_derived(owner, short, raw, words, cwd) for short, _, raw, words in computed]
    for (short, inputs, _, _), (text, line) in zip(computed, checked):
        if any(i in gone for i in inputs):
            st.values[short] = ""
            st.raw.pop(short, None)
            gone.add(short)
            continue
        if line is None:
            st.values[short] = text or ""
        else:
            st.problems.append(line)
            st.values[short] = ""
            gone.add(short)
    for row in rows:
        short = row.name[len("VLGRPO_") :]
        if row.default.startswith("@vg_default_node_devices:") and not st.values.get(short) and short not in gone:
            st.problems.append(
                settings.problem(
                    row.name,
                    "unset, and this node has no accelerator to count (cluster mode from a CPU node)",
                    f"set {row.name} to the devices per node of the cluster's nodes (vlgrpo cluster wait checks it)",
                )
            )


# ---- the rules both recipes share --------------------------------------------------------------------------


def _int(st: State, short: str) -> int:
    return int(st.values[short])


def check_per_node(st: State, var: str, v: int) -> None:
    """A per-node device count above this node's: a placement group asking for more than a node has waits forever."""
    if st.node > 0 and v > st.node:
        st.problems.append(
            settings.problem(
                var,
                f"{v} devices per node, but this node has {st.node} ({st.node_from})",
                f"set {var} to at most {st.node} (or leave it unset to use the node's count)",
            )
        )


def check_lengths(st: State, p: int, r: int, mml: str) -> None:
    """Field case B09(a): with max_model_len below prompt + response verl does not fail, it clamps each request's
    max_tokens, so long answers are cut."""
    if mml and int(mml) < p + r:
        st.problems.append(
            settings.problem(
                "VLGRPO_MAX_MODEL_LEN",
                f"{mml} is below max prompt + max response = {p} + {r} = {p + r}; verl would silently clamp responses",
                f"set VLGRPO_MAX_MODEL_LEN to at least {p + r}, or lower "
                "VLGRPO_MAX_PROMPT_LENGTH / VLGRPO_MAX_RESPONSE_LENGTH",
            )
        )


def check_rollout_layout(st: State, tp: int, dp: int, ep: int, nn: int, pn: int) -> None:
    """A vLLM replica (TP x DP devices) must divide the rollout devices and sit inside one node or span whole nodes
    (verl RolloutReplica); expert parallel is 1 or TP x DP (verl RolloutConfig)."""
    rep, world = tp * dp, nn * pn
    if world % rep:
        st.problems.append(
            settings.problem(
                "VLGRPO_ROLLOUT_TP",
                f"a vLLM replica of TP x DP = {tp} x {dp} = {rep} devices does not divide the "
                f"{world} rollout devices ({nn} x {pn})",
                f"choose the rollout TP (and DP) so that TP x DP divides {world}",
            )
        )
    elif pn % rep and rep % pn:
        st.problems.append(
            settings.problem(
                "VLGRPO_ROLLOUT_TP",
                f"a vLLM replica of {rep} devices neither fits a node of {pn} nor spans whole nodes",
                f"choose TP x DP dividing {pn} or a multiple of it",
            )
        )
    if ep not in (1, rep):
        st.problems.append(
            settings.problem(
                "VLGRPO_ROLLOUT_EP",
                f"{ep} must be 1 or rollout TP x DP = {rep} (verl asserts expert_parallel_size == TP x DP)",
                f"set VLGRPO_ROLLOUT_EP=1 or {rep}",
            )
        )


def _has_manifest(folder: str) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(n.startswith("vlgrpo-manifest-") and n.endswith(".json") and len(n) >= 21 for n in names)


def check_resume(st: State) -> None:
    """``resume_path`` needs a ``global_step_N`` folder (verl asserts the name), a path without that mode would be
    ignored, and a folder outside the checkpoint folder needs a manifest (its files are unpickled at resume, C03)."""
    mode, folder = st.values.get("RESUME_MODE", ""), st.values.get("RESUME_FROM_PATH", "")
    var = "VLGRPO_RESUME_FROM_PATH"
    if mode == "resume_path" and not folder:
        st.problems.append(
            settings.problem(
                var,
                "unset, but VLGRPO_RESUME_MODE=resume_path",
                "set it to a checkpoint folder .../global_step_N, or use VLGRPO_RESUME_MODE=auto",
            )
        )
    elif mode != "resume_path" and folder:
        st.problems.append(
            settings.problem(
                var,
                f"set, but VLGRPO_RESUME_MODE={mode} ignores it",
                "set VLGRPO_RESUME_MODE=resume_path, or unset VLGRPO_RESUME_FROM_PATH",
            )
        )
    elif folder and not folder.rpartition("/")[2].startswith("global_step_"):
        st.problems.append(
            settings.problem(
                var,
                f"{folder} is not a global_step_N folder (verl requires that name)",
                "point it at .../global_step_N inside the checkpoint folder",
            )
        )
    elif folder:
        real, root = mounts.real(folder), mounts.real(st.values.get("CHECKPOINT_DIR", ""))
        if not real.startswith(root + "/") and not _has_manifest(real):
            st.problems.append(
                settings.problem(
                    var,
                    f"{folder} lies outside the checkpoint folder {root} and carries no vlgrpo manifest, so nothing "
                    "shows who wrote it (its files are unpickled at resume)",
                    f"copy it into VLGRPO_CHECKPOINT_DIR, or check it and run: python -m vlgrpo checkpoint trust {folder}",
                )
            )


def _storage_problem(st: State, var: str, fault: str, fix: str) -> None:
    """A planning dry run (VLGRPO_PLAN_DEVICES_PER_NODE) describes another machine: this container's storage only
    earns a warning in the plan; every other run refuses."""
    if st.dry_run and st.values.get("PLAN_DEVICES_PER_NODE"):
        st.notes.append(
            f"warning: {var}: {fault} (planning dry run: not refused here; a launch on this machine would be)"
        )
    else:
        st.problems.append(settings.problem(var, fault, fix))


def check_checkpoint_dir(st: State, var: str, folder: str) -> None:
    """The checkpoint folder (an existing folder, validated) must take a real write, and inside a container
    (:func:`vlgrpo.mounts.in_container`) it must be a mount of its own of a volume file-system type
    (:data:`vlgrpo.mounts.VOLUME_FS`), or checkpoints vanish with the container (field case C03). Free space
    against one checkpoint's size is the preflight's (it knows the model)."""
    probe = ""
    for _ in range(8):
        name = os.path.join(folder, ".vlgrpo-write-test." + os.urandom(6).hex())
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            continue
        except OSError:
            break
        probe = name
        break
    if not probe:
        st.problems.append(
            settings.problem(
                var,
                f"{folder} is not writable by uid {os.getuid()}",
                "mount it read-write and make it writable for this user (checkpoints go there)",
            )
        )
        return
    os.unlink(probe)
    if not mounts.in_container(st.markers, st.mountinfo):
        return
    try:
        table = mounts.read_mounts(st.mountinfo)
    except OSError:
        st.problems.append(
            settings.problem(
                var,
                f"inside a container, and {st.mountinfo} is unreadable, so {folder} cannot be shown to be a mount",
                "run with /proc mounted (the default for docker and podman)",
            )
        )
        return
    m = mounts.mount_of(mounts.real(folder), table)
    if m is None or m.point == "/":
        _storage_problem(
            st,
            var,
            f"{folder} is inside the container's own file system, so checkpoints vanish with the container",
            f"mount a host or shared volume there (docker run -v HOST_DIR:{folder}, or a compose volume)",
        )
    elif m.fstype not in mounts.VOLUME_FS:
        _storage_problem(
            st,
            var,
            f"{folder} is on a {m.fstype} mount ({m.point}) that does not outlive the container "
            f"or is not a volume (accepted file systems: {mounts.VOLUME_FS_WORDS})",
            f"mount a persistent host or shared volume at {folder}",
        )


# ---- the recipes' own rules -------------------------------------------------------------------------------------


def check_fa(st: State) -> None:
    """The fully-async recipe (separate trainer and rollout nodes)."""
    p, r, mml = _int(st, "MAX_PROMPT_LENGTH"), _int(st, "MAX_RESPONSE_LENGTH"), st.values.get("MAX_MODEL_LEN", "")
    tn, td = _int(st, "TRAINER_NNODES"), _int(st, "TRAINER_DEVICES_PER_NODE")
    rn, rd = _int(st, "ROLLOUT_NNODES"), _int(st, "ROLLOUT_DEVICES_PER_NODE")
    sp, fsdp, tp, ep = _int(st, "SP_SIZE"), _int(st, "FSDP_SIZE"), _int(st, "ROLLOUT_TP"), _int(st, "ROLLOUT_EP")
    mini, n, tok = _int(st, "PPO_MINI_BATCH_SIZE"), _int(st, "ROLLOUT_N"), _int(st, "PPO_MAX_TOKEN_LEN_PER_DEVICE")
    tw, rw, seq = tn * td, rn * rd, p + r
    prob = st.problems.append
    check_per_node(st, "VLGRPO_TRAINER_DEVICES_PER_NODE", td)
    check_per_node(st, "VLGRPO_ROLLOUT_DEVICES_PER_NODE", rd)
    check_lengths(st, p, r, mml)
    if tok * sp < seq:
        prob(
            settings.problem(
                "VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE",
                f"{tok} x SP size {sp} = {tok * sp} tokens cannot "
                f"hold one sequence of prompt + response = {seq} (verl asserts max_token_len >= sequence "
                "length)",
                f"set VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE to at least {(seq + sp - 1) // sp}, or raise VLGRPO_SP_SIZE",
            )
        )
    if tw % sp:
        prob(
            settings.problem(
                "VLGRPO_SP_SIZE",
                f"{sp} does not divide the trainer's {tw} devices ({tn} x {td})",
                f"choose a divisor of {tw}",
            )
        )
    elif (mini * n) % (tw // sp):
        prob(
            settings.problem(
                "VLGRPO_PPO_MINI_BATCH_SIZE",
                f"mini-batch {mini} x {n} responses = {mini * n} samples "
                f"do not split evenly over {tw // sp} data-parallel ranks (trainer devices / SP)",
                f"choose VLGRPO_PPO_MINI_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of {tw // sp}",
            )
        )
    if fsdp != -1 and tw % fsdp:
        prob(
            settings.problem(
                "VLGRPO_FSDP_SIZE",
                f"{fsdp} does not divide the trainer's {tw} devices ({tn} x {td})",
                f"set -1, {tw}, or a divisor of {tw}",
            )
        )
    check_rollout_layout(st, tp, 1, ep, rn, rd)
    ol = _int(st, "OVERLONG_BUFFER_LEN")
    if ol >= r:
        prob(
            settings.problem(
                "VLGRPO_OVERLONG_BUFFER_LEN",
                f"{ol} is not below the max response length {r} (every response would be penalised)",
                f"set it below {r} (upstream: half of it)",
            )
        )
    check_resume(st)
    st.values["max_num_batched_tokens"] = str(seq)
    st.topology = f"trainer {tn} node(s) x {td} + rollout {rn} node(s) x {rd} = {tw + rw} {st.platform} devices"
    st.cluster = (tn + rn, max(td, rd), tw + rw)


def check_vo(st: State) -> None:
    """The VeOmni recipe (trainer and rollout colocated). Field case B08: no budget rule here (vLLM 0.13.0 refuses
    max_num_batched_tokens < max_model_len only with chunked prefill off; the preflight checks the engine arguments
    verl builds against vLLM's own rule). Field case B19: fsdp_size x ulysses size must be the world size."""
    p, r, mml = _int(st, "MAX_PROMPT_LENGTH"), _int(st, "MAX_RESPONSE_LENGTH"), st.values.get("MAX_MODEL_LEN", "")
    tn, td = _int(st, "TRAINER_NNODES"), _int(st, "TRAINER_DEVICES_PER_NODE")
    sp, fsdp, ep = _int(st, "SP_SIZE"), _int(st, "FSDP_SIZE"), _int(st, "EP_SIZE")
    bs, mini, n = _int(st, "TRAIN_BATCH_SIZE"), _int(st, "PPO_MINI_BATCH_SIZE"), _int(st, "ROLLOUT_N")
    world = tn * td
    prob = st.problems.append
    check_per_node(st, "VLGRPO_TRAINER_DEVICES_PER_NODE", td)
    check_lengths(st, p, r, mml)
    if world % sp:
        prob(
            settings.problem(
                "VLGRPO_SP_SIZE",
                f"{sp} does not divide the world size {world} ({tn} x {td})",
                f"choose a divisor of {world}",
            )
        )
    elif fsdp != -1 and fsdp * sp != world:
        prob(
            settings.problem(
                "VLGRPO_FSDP_SIZE",
                f"fsdp_size {fsdp} x SP size {sp} = {fsdp * sp} is not the world size {world} ({tn} x {td})",
                f"set VLGRPO_FSDP_SIZE={world // sp} or -1, or leave it unset",
            )
        )
    if world % ep:
        prob(
            settings.problem(
                "VLGRPO_EP_SIZE", f"{ep} does not divide the world size {world}", f"choose a divisor of {world}"
            )
        )
    if bs < mini:
        prob(
            settings.problem(
                "VLGRPO_PPO_MINI_BATCH_SIZE",
                f"{mini} is larger than the train batch size {bs} (verl: "
                "train_batch_size must be >= ppo_mini_batch_size)",
                f"set it to at most {bs}",
            )
        )
    if (bs * n) % world:
        prob(
            settings.problem(
                "VLGRPO_TRAIN_BATCH_SIZE",
                f"{bs} prompts x {n} responses = {bs * n} samples are not "
                f"divisible by the world size {world} (verl validate_config)",
                f"choose VLGRPO_TRAIN_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of {world}",
            )
        )
    if world % sp == 0 and (mini * n) % (world // sp):
        prob(
            settings.problem(
                "VLGRPO_PPO_MINI_BATCH_SIZE",
                f"mini-batch {mini} x {n} responses = {mini * n} samples "
                f"do not split evenly over {world // sp} data-parallel ranks",
                f"choose VLGRPO_PPO_MINI_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of {world // sp}",
            )
        )
    check_rollout_layout(st, _int(st, "ROLLOUT_TP"), _int(st, "ROLLOUT_DP"), _int(st, "ROLLOUT_EP"), tn, td)
    check_resume(st)
    st.topology = f"{tn} node(s) x {td} = {world} {st.platform} devices (trainer and rollout colocated)"
    st.cluster = (tn, td, world)


CHECKS: dict[str, Callable[[State], None]] = {"fa": check_fa, "vo": check_vo}


# ---- the argv -------------------------------------------------------------------------------------------------


def _placeholder(element: str) -> str | None:
    """The first ``{NAME}`` of ``element`` (``NAME``: a letter, then letters, digits and ``_``), or None."""
    start = 0
    while True:
        i = element.find("{", start)
        if i < 0:
            return None
        j = i + 1
        while j < len(element) and (element[j].isascii() and (element[j].isalnum() or element[j] == "_")):
            j += 1
        name = element[i + 1 : j]
        if j < len(element) and element[j] == "}" and name and name[0].isascii() and name[0].isalpha():
            return name
        start = i + 1


def build_argv(recipe: Recipe, values: Values) -> list[str]:
    """The program and the template with every placeholder replaced by its value; an element one of whose
    placeholders is empty is left out. Raises KeyError naming a placeholder that has no value at all (a bug)."""
    out = list(recipe.program)
    for element in recipe.template:
        keep = True
        while (name := _placeholder(element)) is not None:
            if name not in values:
                raise KeyError(name)
            if not values[name]:
                keep = False
                break
            element = element.replace("{" + name + "}", values[name])
        if keep:
            out.append(element)
    return out


def hydra_key(element: str) -> str:
    """The Hydra key an override sets: the text before the first ``=``, without a leading ``++``, ``+`` or ``~``."""
    key = element.partition("=")[0]
    key = key[2:] if key.startswith("++") else key
    key = key[1:] if key.startswith("+") else key
    return key[1:] if key.startswith("~") else key


def merge_overrides(argv: list[str], first: int, overrides: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` with each accepted override (``key=value``, checked by :mod:`vlgrpo.preflight.overrides`) in place of
    the element that sets the same key (elements before ``first`` are the program), or appended; and the plan's
    note for each."""
    out, notes = list(argv), []
    for el in overrides:
        key = hydra_key(el)
        i = next((j for j in range(first, len(out)) if hydra_key(out[j]) == key), len(out))
        if i < len(out):
            notes.append(f"override from VLGRPO_OVERRIDES_FILE: {el} (in place of the template element {out[i]})")
            out[i] = el
        else:
            notes.append(f"override from VLGRPO_OVERRIDES_FILE: {el}")
            out.append(el)
    return out, notes


def duplicate_problems(argv: list[str], first: int) -> list[str]:
    """Field case B11: Hydra keeps the last of two overrides of the same key without a word, so two elements that
    set the same key (after stripping ``+``/``++``/``~``) are an error, whatever their values. Positions are
    1-based argv positions; elements before ``first`` (the program words) and words without ``=`` are skipped."""
    seen: dict[str, int] = {}
    out = []
    for i in range(first, len(argv)):
        if "=" not in argv[i]:
            continue
        key = hydra_key(argv[i])
        if key in seen:
            out.append(
                settings.problem(
                    f"override {key}",
                    f"set twice, at argv positions {seen[key]} and {i + 1} (Hydra would silently keep the last)",
                    "set it once",
                )
            )
        else:
            seen[key] = i + 1
    return out
