"""The table's rows for what is refused before anything runs, one tuple a family, in
the order ``mur explain`` lists them: ``ROS`` (``roster.yaml`` and its admission), ``REG``
(the artifact stores, ``.mur.zip`` artifacts and ``murmur.lock``), ``MAN`` (a capsule's
``murmur.yaml``). ``table.py`` joins them with the rest into the one table.
"""

from __future__ import annotations

from launcher.diagnostics.entry import CodeEntry

#: ``ROS``: roster.yaml and admission.
ROSTER_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "E-ROS-001", "error",
        "roster.yaml does not read, or does not have the roster's shape",
        "{file}: {problem}",
        "{fix}",
        "Admission check 1. `roster.yaml` is missing or unreadable, is not UTF-8 YAML (tabs "
        "used for indentation, anchors or aliases, more than one document, over 256 KiB), or "
        "does not have the roster's shape: a key the roster format does not "
        "list, at any level; a required key missing; a value of the wrong type; "
        "`roster_version` other than `1` or `2`; in a version 1 roster, a key only "
        "version 2 has (`limits`, `approve`, `approve_timeout`, `approve_queue`; the "
        "message says it needs `roster_version: 2`); no members; a member name outside "
        "`^[a-z][a-z0-9-]{0,31}$`; a bare capsule name (the hint names its scoped forms, "
        "such as `local/<name>`); a blank version or one of `latest`, `stable`, `edge`; a "
        "rule whose `to` is empty or names its own `from`.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-002", "error",
        "Not exactly one member has `entry: true`",
        "{file}: {found} `entry: true`; exactly one member must",
        "set `entry: true` on the one member that receives the formation's task, and on no "
        "other member",
        "Admission check 3. No member, or more than one, is the entry member.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-003", "error",
        "Two members have the same name",
        "{file}: {field}: member name `{name}` is already used by {first}",
        "give each member a name of its own; two members may still run the same capsule",
        "Admission check 2. Member names are unique within a roster.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-004", "error",
        "A reachability rule names no member",
        "{file}: `{field}` is `{name}`, which names no member of this roster",
        "name a member of this roster ({members}){suggestion}",
        "Admission check 4. Every rule's `from` and every name in its `to` must be the name "
        "of a member.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-005", "error",
        "A member a rule calls does not serve peers",
        "{file}: `{field}` lets `{caller}` call `{member}`, but {capsule} {version} does not "
        "declare `exports.peer_tasks.accept: true`",
        "declare `exports: {{peer_tasks: {{accept: true}}}}` in the murmur.yaml of {capsule}, "
        "then pack and install it again; or remove `{member}` from the rule",
        "Admission check 7. Every member a rule lists in `to` must declare "
        "`exports.peer_tasks.accept: true`. A caller need not. `reachability: all` only pairs "
        "members that serve peers, so it never gives this code.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-006", "error",
        "The roster has edges and a member's door requires no authentication",
        "{file}: {field}: the roster has edges, and member `{member}` ({capsule} {version}) "
        "does not declare `network.authentication`, so its door would take a task from any "
        "caller",
        "declare `network: {{authentication: {{}}}}` (or its bearer and jwt credentials) in "
        "the murmur.yaml of {capsule}, then pack and install it again; once a roster has an "
        "edge every member needs it, members on no edge included",
        "Admission check 8. With at least one edge, every member must declare "
        "`network.authentication`, because a member's door is where the roster is enforced. A "
        "roster with one member, no `reachability`, or an `all` that pairs no members has no "
        "edges and needs none.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-007", "error",
        "A member is not installed at its version, or its packed murmur.yaml does not parse",
        "{file}: {field}: member `{member}`: {problem}",
        "{fix}",
        "Admission check 6, first row. The member's capsule is looked up at its exact "
        "version in the project store (`.murmur/artifacts/`) and then the global store "
        "(`$MURMUR_HOME/artifacts/`). It is refused when it is in neither, when the artifact "
        "found is not a readable capsule artifact or its bytes no longer match the sha256 "
        "recorded at install, or when the `murmur.yaml` packed in it does not parse (the "
        "message quotes that manifest's own code). For a capsule in neither store the hint "
        "names the first step that fits (`mur run --roster --rebuild` when the project "
        "holds its source, `mur install` when it holds its `.mur.zip`), then the versions "
        "of that capsule that are installed, or an installed capsule whose name is close.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-008", "error",
        "A rule lets a member call the entry member",
        "{file}: `{field}` lists the entry member `{member}`; no member may call the entry "
        "member",
        "remove `{member}` from the rule; to hear from a member, let `{member}` call it "
        "(a rule `from: {member}` with that member in `to`): the answer comes back into "
        "its own task",
        "Admission check 5. The entry member is never called by a peer: no member holds a "
        "credential for its door.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-009", "error",
        "`mur new --roster` would overwrite files",
        "mur new --roster: {target} already exists",
        "choose a directory that does not exist yet, or one without roster.yaml and the "
        "member directories `mur new --roster` writes",
        "`mur new --roster DIR` never overwrites a file: DIR must not already hold "
        "`roster.yaml` or the member source directories it writes.",
    ),
    CodeEntry(
        "E-ROS-010", "error",
        "A member's python agent does not compile or define its async function",
        "{file}: {field}: the agent of {capsule} {version} ({entry}) cannot run: {problem}",
        "fix the agent's source, then pack and install it again (or `mur run --roster "
        "--rebuild` when its source is in the project)",
        "Checked after the roster's own checks, member by member, without running any of "
        "the agent's code: the `agent.python` module in the installed artifact compiles, "
        "and defines `async def` of the callable it names (or imports that name). A "
        "syntax error is named with its file and line, so `mur doctor` finds it and a "
        "launch refuses before it starts anything.",
        "murmur-door",
    ),
    CodeEntry(
        "E-ROS-011", "error",
        "A member's capsule needs a Python distribution that is not installed",
        "{file}: {field}: {capsule} {version} needs {missing} (agent.requires)",
        "install it into the Python mur runs with: `{install}`",
        "Checked after the roster's own checks, member by member: every requirement of a "
        "capsule's `agent.requires` (pip requirement strings) is installed where `mur` runs, "
        "at a version it allows. The hint is the `pip install` that fixes it.",
        "murmur-door",
    ),
    CodeEntry(
        "E-ROS-012", "error",
        "A bound along the edges that no call can meet (roster version 2)",
        "{file}: {field}: {problem}",
        "{fix}",
        "Checked in a version 2 roster (docs/bounds.md), after check 5 for what the roster "
        "writes and after check 7 for what the members' manifests say: every limit "
        "(`limits.depth`, a member's `limits.calls` and `limits.tokens`, an edge's "
        "`limits.calls`, `concurrent` and `per_minute`) is at least 1; an edge's "
        "`approve_queue` is from 1 to 48 (one caller's share of the callee's 64 approval "
        "places); no edge is bounded by two rules; `approve: true` is only on edges into "
        "members whose door can hold a task for the operator (not a gateway member, "
        "whose tasks are its upstream's); a member's `limits.tokens` is only on a model "
        "member.",
        "murmur-door",
    ),
    CodeEntry(
        "E-ROS-013", "error",
        "`--rebuild` found a member's capsule source that does not pack",
        "{file}: {field}: the source of member `{member}` in `{source}` does not pack "
        "({fault}); nothing was installed and nothing started",
        "fix `{manifest}` (`mur pack {source}` names each fault) and run again",
        "`mur run --roster --rebuild` packs every member's source in the project before it "
        "installs any: each that does not pack is named, none is installed, and no member "
        "starts, so stale code never runs in place of an edit that did not build.",
        "murmur-door",
    ),
    CodeEntry(
        "W-ROS-001", "warning",
        "More members may call a member than it holds tasks at once",
        "{file}: {field}: {callers} members may call `{member}` ({names}), but it holds "
        "{holds} at once (lifecycle.concurrency {concurrency} + lifecycle.queue_depth "
        "{queue_depth})",
        "set `lifecycle.queue_depth: {needed}` in the murmur.yaml of {capsule} so that it "
        "holds every caller, then pack and install it again; until then a caller that finds "
        "it full is told it is busy and offers the task again until its deadline",
        "Given after a roster is admitted, once for every called member whose callers "
        "outnumber the tasks it holds at once (`concurrency + queue_depth`). It names the "
        "`lifecycle.queue_depth` that would hold every caller. The roster is still admitted.",
        "reference",
    ),
    CodeEntry(
        "W-ROS-002", "warning",
        "`reachability: all` lets the entry member call nobody",
        "{file}: {field}: `all` lets the entry member `{entry}` call no other member: {why}",
        "{fix}",
        "Given after a roster with `reachability: all` and more than one member is admitted, "
        "when the entry member gets no edge: under `all` it calls the other members that "
        "serve peers only if its own capsule serves peers too "
        "(`exports.peer_tasks.accept: true`), and none of the others may call it. The "
        "roster is still admitted; the formation runs, but its entry member can hand no "
        "work to anyone.",
        "murmur-door",
    ),
    CodeEntry(
        "W-ROS-003", "warning",
        "A member's capsule source in the project differs from what is installed",
        "{file}: {field}: the source of {capsule} {version} in `{source}` differs from the "
        "installed artifact member `{member}` runs: your edits are not what runs",
        "run `mur run --roster --rebuild`, which packs and installs every member's source "
        "in the project before it launches, or `mur pack {source}` and `mur install --force` "
        "the file it writes",
        "Given by `mur doctor` and at launch for each member whose capsule (`local/<name>` "
        "at the roster's version) has its source in the project (the project directory or "
        "a directory directly under it holding a murmur.yaml) and whose source packs to "
        "other bytes than the installed artifact. Packing is reproducible, so this is "
        "exact. The roster is still admitted, with what is installed.",
        "murmur-door",
    ),
    CodeEntry(
        "W-ROS-005", "warning",
        "A member's capsule source in the project does not pack",
        "{file}: {field}: the source of member `{member}` in `{source}` does not pack "
        "({fault}): what runs is the installed {capsule} {version}, not your edits",
        "fix `{manifest}` (`mur pack {source}` names each fault), then run "
        "`mur run --roster --rebuild`",
        "Given by `mur doctor` and at launch for each member whose source in the project "
        "(the project directory or a directory directly under it holding a murmur.yaml, "
        "matched by the `name` and `version` it shows, else by its folder's name) has a "
        "`murmur.yaml` that does not read or does not pack. Given before admission too, so "
        "that in a new project the fault is named before the `E-ROS-007` it causes. With "
        "`--rebuild` the same fault is `E-ROS-013` and nothing starts.",
        "murmur-door",
    ),
    CodeEntry(
        "W-ROS-004", "warning",
        "A model member reads a variable that is not set where `mur` runs",
        "{file}: {field}: model member `{member}` reads {what} from `{variable}` "
        "({manifest_field}), which is not set in this environment: its first model call "
        "will fail with {fails_with}",
        "set `{variable}` where you run `mur` (`export {variable}=...`), {alternative}",
        "Given by `mur doctor` and at launch for each model member (`agent.model`) whose "
        "`inference.api_key_env`, or a `${VAR}` with no default in `inference.base_url` or "
        "`inference.model`, names a variable that is unset or empty in the environment `mur` "
        "runs in, where the members take their variables from. The roster is still admitted; "
        "the member starts, and its first task fails with the code named.",
        "murmur-door",
    ),
)

#: ``REG``: stores, artifacts, murmur.lock.
STORE_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "E-REG-001", "error",
        "A capsule is not installed at that version",
        "{capsule} {version} is not installed in the project store ({project_store}) or the "
        "global store ({global_store})",
        "{fix}",
        "A capsule is looked up at its exact version in the project store, then the global "
        "store, and was in neither. The hint names the first step that fits (pack and "
        "install the project's source of that capsule and version, or install its "
        "`.mur.zip` when the project holds one), then the versions of that capsule that are "
        "installed, or, when none is, an installed capsule whose name is close. (Admission "
        "reports the same fault for a member as `E-ROS-007`.)",
    ),
    CodeEntry(
        "E-REG-002", "error",
        "That version is already installed with other bytes",
        "{capsule} {version} is already installed in {store} with sha256 {installed}; "
        "{file} has sha256 {offered}",
        "a version names one artifact: raise `version` in murmur.yaml and pack again, or "
        "replace the installed artifact with `mur install --force {file}`",
        "`mur install` refuses to replace an installed artifact with different bytes at the "
        "same version, because admission and `murmur.lock` bind members to those bytes. "
        "Installing the same bytes again changes nothing.",
    ),
    CodeEntry(
        "E-REG-003", "error",
        "A file is not a usable capsule artifact",
        "{file}: {problem}",
        "{fix}",
        "A `.mur.zip` being installed or unpacked, or an installed artifact being read, is "
        "not a zip file, holds an unsafe entry (an absolute path, `..`, a symbolic link, a "
        "device), is larger than murmur unpacks, has no `murmur.yaml` at its top, names "
        "another capsule than its place in the store, or its bytes differ from the sha256 "
        "recorded when it was installed.",
    ),
    CodeEntry(
        "E-REG-004", "error",
        "murmur.lock does not read, or does not have the lock's shape",
        "{file}: {problem}",
        "{fix}",
        "`murmur.lock` must be YAML holding `lock_version: 1` and `artifacts`, a mapping "
        "from `<scope>/<name>` to `{version, sha256}`. `mur lock` writes it.",
    ),
    CodeEntry(
        "E-REG-005", "error",
        "murmur.lock pins a capsule at another version or hash",
        "{file} pins {capsule} at {pinned_version} (sha256 {pinned_sha256}), but {subject} "
        "resolved {version} (sha256 {sha256})",
        "install the artifact the lock pins, or run `mur lock` to pin what the roster "
        "resolves to now",
        "Admission check 6, second row, and every lookup `mur run` makes: when the "
        "project's `murmur.lock` pins a capsule, the version and the sha256 resolved must "
        "both match the pin. A capsule the lock does not pin is taken at the version asked "
        "for. Admission never creates or changes `murmur.lock`.",
        "reference",
    ),
    CodeEntry(
        "E-REG-006", "error",
        "Two members run one capsule at different versions, and a lock pins one version",
        "{file}: members `{first}` and `{second}` run {capsule} at {first_version} and "
        "{second_version}; murmur.lock pins one version of a capsule",
        "run both members at one version of {capsule}, then run `mur lock` again",
        "`mur lock` pins one version and one sha256 per capsule, so it refuses a roster "
        "whose members run the same capsule at two versions.",
    ),
    CodeEntry(
        "E-REG-007", "error",
        "A capsule source directory cannot be packed",
        "{source}: {problem}",
        "{fix}",
        "`mur pack` packs regular files only: it refuses a symbolic link, a device or a "
        "socket in the source, an unreadable file, a file name an archive cannot carry "
        "safely, and a source over the size murmur packs.",
    ),
    CodeEntry(
        "E-REG-008", "error",
        "Not a capsule reference",
        "`{capsule}` at version `{version}` is not a capsule reference: {problem}",
        "name a capsule as `<scope>/<name>` (`local/<name>` for one installed from its "
        ".mur.zip file) and give its exact version, such as 1.2.0",
        "A capsule is named `<scope>/<name>`, each part matching `^[a-z][a-z0-9-]{0,31}$`, "
        "at an exact version made of letters, digits, `.`, `_`, `+` and `-`.",
    ),
)

#: ``MAN``: murmur.yaml.
MANIFEST_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "E-MAN-001", "error",
        "murmur.yaml has a key or a value its schema refuses",
        "{file}: {problem}",
        "{fix}",
        "Any key `murmur.yaml` does not list, at any level, is refused and named by its "
        "dotted path (such as `lifecycle.concurency`); so is a missing required key, a value "
        "of the wrong type or out of range, an agent with other than exactly one of "
        "`python`, `command`, `a2a` and `model`, an `agent.a2a` with other than exactly one "
        "of `command` and `url` or a header that uses a `${VAR}` `capabilities.env.allow` "
        "does not name, an `agent.model` without `inference.transport: http`, "
        "`inference.base_url` and `inference.model`, an `inference.api_key_env` or "
        "`${VAR}` base URL or model the grant does not name, a literal base URL whose host "
        "`capabilities.network.allow` does not grant, a duration that is not a whole "
        "number followed by `s`, `m`, `h`, `d` or `w`, and `network.authentication:` "
        "written with no value.",
    ),
    CodeEntry(
        "E-MAN-002", "error",
        "murmur.yaml is missing or does not read as YAML",
        "{file}: {problem}",
        "{fix}",
        "The capsule has no `murmur.yaml`, or it cannot be read, is not UTF-8, is not YAML "
        "(tabs used for indentation, anchors or aliases, more than one document), is over "
        "256 KiB, or does not hold a mapping at its top.",
    ),
    CodeEntry(
        "E-MAN-003", "error",
        "`network.authentication` beside a non-empty `capabilities.spawn.allow`",
        "{file}: `network.authentication` is declared beside a non-empty "
        "`capabilities.spawn.allow` ({spawn})",
        "a capsule whose door requires authentication cannot delegate to child capsules: "
        "remove `capabilities.spawn.allow`, or remove `network.authentication` (which "
        "leaves a public door, refused in any roster with edges)",
        "`murmur.yaml` refuses `network.authentication` beside a non-empty "
        "`capabilities.spawn.allow`, so a member of a roster with edges cannot also delegate "
        "to child capsules.",
        "reference",
    ),
    CodeEntry(
        "E-MAN-004", "error",
        "murmur.yaml names a file the capsule does not hold",
        "{file}: `{field}` names {target}, which is not in the capsule",
        "add {target} to the capsule directory, or correct `{field}` (paths are relative to "
        "the directory holding murmur.yaml)",
        "Checked by `mur pack` and `mur install`: the module of `agent.python`, and each "
        "`jwks_file` or `pem_file` of `network.authentication.jwt`, must be a file inside "
        "the capsule.",
    ),
    CodeEntry(
        "E-MAN-005", "error",
        "`mur new` would overwrite files",
        "mur new: {target} already exists",
        "choose a directory that does not exist yet, or an empty one",
        "`mur new DIR` never overwrites a file: DIR must not already hold a `murmur.yaml` "
        "or the agent module it writes.",
    ),
)
