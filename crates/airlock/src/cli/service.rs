//! The arguments of airlock as a service and of its tooling: `serve`, `mcp`, `token`, `man`,
//! `completions`, `policy`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// airlock's config file, whose [audit] export the server carries out while it runs
    /// [default: /etc/airlock/config.toml as root, else $XDG_CONFIG_HOME/airlock/config.toml]
    #[arg(long, value_name = "FILE", env = "AIRLOCK_CONFIG")]
    pub config: Option<PathBuf>,
    /// unix:PATH, an absolute socket path, or IP:PORT [default: unix socket STATE_DIR/airlock.sock]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// TLS certificate chain (PEM), with --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM), with --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Listen beyond loopback without TLS, accepting that tokens cross that network in clear
    /// text: only where the network itself is private to the server and its one client, as a pod
    /// behind agent-sandbox's router (which speaks plain HTTP to its pods), with a NetworkPolicy
    /// that admits only the router
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    pub allow_clear_text: bool,
    /// Read the API's tokens from FILE (as 'airlock token create' writes STATE/tokens.json: only
    /// hashes) instead of the state directory's, read again when it changes; for a file that is
    /// mounted in, such as a Kubernetes Secret. It may be root's or this user's, never writable
    /// by others. 'airlock token create' and 'revoke' then change it only where it comes from
    #[arg(long, value_name = "FILE", env = "AIRLOCK_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
    /// Largest request body taken, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Bytes of each output stream a run's answer keeps (the profile's output limit applies first)
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_output: u64,
    /// Requests a second each token may make (twice that in a burst)
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub requests_per_second: u32,
    /// Runs each token may have going at once
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub runs_per_token: u32,
    /// After SIGTERM, how long runs may go on before they are interrupted
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub grace: String,
    /// A name the server answers to over TCP besides its IP addresses and localhost (the name in
    /// its clients' URLs, e.g. airlock.internal), or every name under one (*.agents.svc.cluster.local,
    /// as a pod's Service names); repeat for more. Others are refused (421), as DNS rebinding
    /// would send them
    #[arg(long = "host-name", value_name = "NAME")]
    pub host_names: Vec<String>,
    /// Sandboxes kept prepared for each kind of throwaway run (the same token, profile and
    /// workspace) so that a run need not wait for its sandbox to be built; each is used for one
    /// run; 0 keeps none
    #[arg(long, value_name = "N", default_value_t = airlock_runner::pool::DEFAULT_PER_KIND)]
    pub warm: usize,
    /// Prepared sandboxes kept in all, whatever their kinds
    #[arg(long, value_name = "N", default_value_t = airlock_runner::pool::DEFAULT_MAX_WORKERS)]
    pub warm_max: usize,
    /// Also serve agent-sandbox's in-pod runtime (kubernetes-sigs/agent-sandbox: POST /execute,
    /// POST /upload, GET /download|list|exists/PATH), without a token: each request a run in
    /// one session over --workspace, with --profile; what it writes waits in the session for
    /// 'airlock diff' and 'airlock apply'. Only the pod's agent may reach --listen
    #[arg(long, requires = "workspace")]
    pub agent_sandbox: bool,
    /// The directory the pod's agent works on (with --agent-sandbox)
    #[arg(long, value_name = "DIR", requires = "agent_sandbox")]
    pub workspace: Option<PathBuf>,
    /// The profile the pod's runs use (with --agent-sandbox) [default: default]
    #[arg(long, short = 'p', value_name = "NAME", requires = "agent_sandbox")]
    pub profile: Option<String>,
    /// The session the pod's runs go into (with --agent-sandbox) [default: the runtime's own,
    /// pod-…: the newest it made over this workspace and profile that is not applied or
    /// discarded yet, or a new one]
    #[arg(long, value_name = "ID", requires = "agent_sandbox")]
    pub session: Option<String>,
    /// Also serve sandboxd's REST files API (PUT/GET/HEAD/DELETE /v1/files/PATH) on this
    /// IP:PORT (with --agent-sandbox; sandboxd's own is 8080)
    #[arg(long, value_name = "ADDR", requires = "agent_sandbox")]
    pub sandboxd_rest: Option<std::net::SocketAddr>,
    /// Also serve sandboxd's gRPC ProcessService (Execute) on this IP:PORT (with
    /// --agent-sandbox; sandboxd's own is 9090)
    #[arg(long, value_name = "ADDR", requires = "agent_sandbox")]
    pub sandboxd_grpc: Option<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// The operator token (id or name) the page works as [default: a new one for --profile, living 12 hours]
    #[arg(long, value_name = "ID")]
    pub token: Option<String>,
    /// The profile whose sessions a new token reaches
    #[arg(long, short = 'p', value_name = "NAME", conflicts_with = "token")]
    pub profile: Option<String>,
    /// The page's address [default: where the running 'airlock serve' listens on TCP]
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print the link as JSON, with what it is bound to
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The project the agent works on [default: the working directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The profile its commands run under [default: default]
    #[arg(long, short = 'p', value_name = "NAME")]
    pub profile: Option<String>,
    /// Go on in this session (id or name) rather than start one at the first run
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Bytes of each output stream a run's answer keeps (the profile's output limit applies first)
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_output: u64,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token; it is printed once, as the last line of stdout
    #[command(
        long_about = "Make a token for one automation, bound to a profile and a role, and print \
            it once (the last line of stdout): airlock keeps only its hash. An agent token needs \
            --workspace, the directory its sessions overlay; its requests may name a directory \
            under it, never beyond. An agent token runs commands, starts and reads sessions of its \
            own; an operator token also applies, reverts, discards, kills, pauses, resumes, \
            disables and enables, within its profile.",
        after_help = "Example:\n  airlock token create --profile n8n --role agent --workspace /srv/n8n-work --name n8n --expires 90d\n\n\
            Exit status: 0 made; 125 refused (an unknown profile, a workspace no session may have, \
            an agent without --workspace, a taken name)."
    )]
    Create(TokenCreateArgs),
    /// List tokens (never the tokens themselves)
    List(TokenListArgs),
    /// Revoke a token by id or name: it opens nothing from the next request on
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// The profile its requests run with
    #[arg(long, short = 'p', value_name = "NAME", default_value = "default")]
    pub profile: String,
    /// agent (run, sessions, diffs) or operator (also apply, revert, discard, kill, disable)
    #[arg(long, value_name = "ROLE", value_parser = ["agent", "operator"])]
    pub role: String,
    /// The workspace its sessions overlay (required for agents)
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// How long it lives (12h, 30d) [default: until revoked]
    #[arg(long, value_name = "DURATION")]
    pub expires: Option<String>,
    /// A name to know it by
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print the record and the token as one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TokenListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's id or name
    #[arg(value_name = "ID")]
    pub token: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: CompletionShell,
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    #[arg(value_enum)]
    pub what: CompleteWhat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompleteWhat {
    Sessions,
    Profiles,
}

/// The shells `airlock completions` writes for (clap_complete's, less those rare on Linux).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl From<CompletionShell> for clap_complete::Shell {
    fn from(shell: CompletionShell) -> Self {
        match shell {
            CompletionShell::Bash => Self::Bash,
            CompletionShell::Zsh => Self::Zsh,
            CompletionShell::Fish => Self::Fish,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the effective profile: every default filled in, secrets by reference only
    #[command(
        long_about = "Print the profile a run of PROFILE applies, in profile syntax with every \
            built-in default filled in (sizes and durations as a profile writes them: 2GiB, 1h): what reaches the \
            sandbox, what it may reach, its limits. PROFILE is a name, looked up as runs look it \
            up (NAME.toml in $XDG_CONFIG_HOME/airlock/profiles, then /etc/airlock/profiles; \
            without one, a starter shipped with airlock of that name, and 'default' is the \
            built-in default: 'airlock policy list' lists them), or a path to a file when it holds a \
            '/'. Each [[secret]] is shown by where its value comes from (a variable's name, a \
            file's path, a command line), its hosts and how it is injected; no source is read, \
            so no value can be shown. The output read back as a profile is the same profile. \
            --as-written prints the profile's text instead, comments and all; --starter prints \
            the starter of that name even where a file hides it: the way to copy a starter and \
            change it (a copy of the same name then wins over the starter).",
        after_help = "Examples:\n  airlock policy show ci-bot\n  \
            airlock policy show ./profiles/ci-bot.toml --json | jq '.policy.secret'\n  \
            airlock policy show > effective.toml && airlock policy check effective.toml\n  \
            airlock policy show pip --starter > ~/.config/airlock/profiles/pip.toml\n\n\
            Exit status: 0 it was printed; 125 no such profile, it is not valid (the message \
            names the file and line), or airlock failed."
    )]
    Show(PolicyShowArgs),
    /// Check that a file is a valid profile
    #[command(
        long_about = "Parse and validate FILE as a profile, as a run would, without running \
            anything or reading any secret's source: every key known, every value of its type \
            and range, every path absolute, every [[secret]] sound (a variable name, one source, \
            hosts [network] allows, a value that could never reach the sandbox through [env]). \
            Prints 'FILE: valid (profile NAME, N secrets)', or the first error with its file, \
            line and column, and what to do about it.",
        after_help = "Examples:\n  airlock policy check /etc/airlock/profiles/ci-bot.toml\n  \
            airlock policy check ci-bot.toml --json\n\n\
            Exit status: 0 valid; 2 not a valid profile (the message says where and why), or \
            it cannot be read; 125 airlock failed."
    )]
    Check(PolicyCheckArgs),
    /// List the profiles a run can name, and where each comes from
    #[command(
        long_about = "List every profile '-p NAME' can name, in the order a name is looked up: \
            NAME.toml in $XDG_CONFIG_HOME/airlock/profiles (default ~/.config/airlock/profiles), \
            then in /etc/airlock/profiles, then the starter profiles shipped with airlock (pip, \
            npm, cargo, go, github, apt: the hosts each tool needs, commented host by host), then \
            the built-in default. A profile a file earlier in that order hides is listed too, \
            marked hidden: a file of a starter's name is the one runs use.",
        after_help = "Examples:\n  airlock policy list\n  \
            airlock policy list --json | jq -r '.[] | select(.kind == \"starter\") | .name'\n  \
            airlock policy show pip --starter   # a starter's text, to copy and narrow\n\n\
            Exit status: 0 listed; 125 airlock failed."
    )]
    List(PolicyListArgs),
    /// Replay past runs' network attempts against a draft profile: what it would refuse
    #[command(
        long_about = "Decide the network attempts of past runs again, by a draft profile, with \
            the rules the network gate decides by: every DNS query and connection the gate \
            recorded for the runs of the draft's profile (the audit log's net.dns and \
            net.connect records, and the samples of net.suppressed). It prints what the draft \
            would refuse that the runs needed (each destination with its attempts, the rule \
            then and the rule now, and the runs that made them), the runs it would break, what \
            was refused then that the draft would allow, and the draft's allow entries that no \
            attempt went through. A profile change is reviewed against what really happened: \
            'this change would have broken last week's builds'.\n\n\
            PROFILE is the draft: a path (with a '/') or a name looked up as runs look it up. \
            The runs replayed are those of the profile of the same name (--runs-of another), \
            from this state directory's audit log or from a copy of one (--log FILE: what \
            'airlock log --json' printed, JSON lines). A connection made to a name is decided \
            by the name and its port, one made to a bare address by the address; a name the \
            gate refused at DNS never got a connection, so the port it was for is unknown, \
            and it is shown without one. Runs are named by the seq of their run.intent record \
            ('airlock log --json' shows it).",
        after_help = "Examples:\n  airlock policy replay ./ci-bot.toml --since 7d\n  \
            airlock policy replay ./ci-bot.toml --session fix --json | jq '.would_refuse'\n  \
            airlock policy replay ./narrow.toml --runs-of ci-bot --since 2026-11-29T00:00:00Z\n\n\
            In CI, a change to a profile checked against the runs of last week:\n  \
            airlock log --profile ci-bot --since 7d --json > runs.jsonl   # where the runs ran\n  \
            airlock policy replay profiles/ci-bot.toml --log runs.jsonl   # exit 1: it would break them\n\n\
            Exit status: 0 the draft refuses nothing the runs needed; 1 it would refuse \
            something they needed; 2 bad input: the draft is not a valid profile (the message \
            names the file and line), --log's file is not a log (its line), or --since is not \
            a time; 125 airlock failed."
    )]
    Replay(PolicyReplayArgs),
}

#[derive(Debug, Args)]
pub struct PolicyShowArgs {
    /// A profile name, or a file's path (with a '/') [default: default]
    #[arg(value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Print JSON: {"profile", "source", "from", "policy"}, the policy in the same keys as the
    /// TOML ("from": file, starter or builtin)
    #[arg(long, conflicts_with = "as_written")]
    pub json: bool,
    /// Print the profile's text as it is written, comments and all (a file's, a starter's)
    #[arg(long)]
    pub as_written: bool,
    /// Print the starter PROFILE shipped with airlock as written, even where a file of that
    /// name hides it: what a copy starts from
    #[arg(long, conflicts_with_all = ["json", "as_written"])]
    pub starter: bool,
}

#[derive(Debug, Args)]
pub struct PolicyListArgs {
    /// Print JSON: [{"name", "kind": "file"|"starter"|"builtin", "path", "used", "about"}]
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PolicyCheckArgs {
    /// The profile file to check
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print JSON: {"file", "valid", "profile", "secrets"} or {"file", "valid", "error", "code"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PolicyReplayArgs {
    /// The draft: a profile file's path (with a '/'), or a profile name
    #[arg(value_name = "PROFILE")]
    pub profile: String,
    /// Replay the runs of this profile [default: the draft's name]
    #[arg(long, value_name = "NAME")]
    pub runs_of: Option<String>,
    /// Only this session's runs (its id or name)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only attempts since this long ago (10m, 2h, 7d) or this time (2026-11-29T20:00:00Z)
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Read this copy of a log ('airlock log --json' output) instead of the state directory's
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Print JSON: {"draft", "runs_of", "runs", "attempts", "would_refuse", "runs_broken",
    /// "would_now_allow", "never_used", "not_replayed"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Write the manifests of a pool of airlock pods for a profile (YAML on stdout)
    #[command(
        long_about = "Write the Kubernetes manifests that run airlock as the runtime of \
            kubernetes-sigs/agent-sandbox's pods, each command of the pod's agent a run in airlock's \
            sandbox under PROFILE: a ConfigMap with the profile; a SandboxTemplate whose pod runs \
            airlock's image (scripts/build-oci.sh) in its own user namespace with what airlock needs \
            and nothing more, resources from the profile's limits, the API's tokens from the Secret \
            NAME-tokens and the profile's env secrets from NAME-credentials; a SandboxWarmPool; and \
            a NetworkPolicy admitting only agent-sandbox's router and letting the pod reach only \
            public addresses on the ports the profile allows (which domains stays airlock's gate's \
            decision). Notes on what the profile names that a pod will not have go to stderr. \
            docs/kubernetes.md takes it from there to a running pool.",
        after_help = "Examples:\n  airlock k8s render agent --image registry.example/airlock:0.1.0 --namespace agents | kubectl apply -f -\n  \
            airlock token create --role operator --profile agent --state-dir ./k8s-tokens --name k8s\n  \
            kubectl -n agents create secret generic airlock-agent-tokens --from-file=tokens.json=./k8s-tokens/tokens.json\n\n\
            Exit status: 0 written; 125 the profile does not load, or an argument is not a name Kubernetes takes."
    )]
    Render(K8sRenderArgs),
}

#[derive(Debug, Args)]
pub struct K8sRenderArgs {
    /// The profile the pods' runs use (a name, as -p takes it)
    #[arg(value_name = "PROFILE")]
    pub profile: String,
    /// airlock's image, as the cluster pulls it
    #[arg(long, value_name = "IMAGE", default_value = concat!("localhost/airlock:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// The namespace of the pods (and of the router, unless --router-namespace)
    #[arg(long, short = 'n', value_name = "NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// The objects' name (the Secrets': NAME-tokens, NAME-credentials) [default: airlock-PROFILE]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Pods kept warm by a SandboxWarmPool; 0 writes no pool
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub pool: u32,
    /// The cluster's DNS domain (the names the router reaches pods by)
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
    /// The namespace of agent-sandbox's router [default: --namespace; a namespace of its own is
    /// better: whoever makes pods in the router's may label one as the router]
    #[arg(long, value_name = "NAMESPACE")]
    pub router_namespace: Option<String>,
    /// A label of the router's pods, KEY=VALUE; repeat for more
    #[arg(
        long = "router-label",
        value_name = "KEY=VALUE",
        default_value = "app.kubernetes.io/name=sandbox-router"
    )]
    pub router_labels: Vec<String>,
    /// A namespace whose pods may reach the pods' ports directly (sandboxd's in-cluster clients
    /// connect to a pod's address, not through the router); repeat for more
    #[arg(long = "allow-from-namespace", value_name = "NAMESPACE")]
    pub client_namespaces: Vec<String>,
    /// A network of the cluster's own (its pods', services', nodes') that the pods may not reach
    /// even where it is not a private address (some clusters number pods from public ranges);
    /// repeat for more
    #[arg(long = "exclude-cidr", value_name = "CIDR")]
    pub excluded_cidrs: Vec<String>,
    /// Also send the pods' audit records to this OpenTelemetry collector (OTLP/HTTP, e.g.
    /// http://otel-collector.observability:4318); they always go to stdout as JSON lines
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The objects as a JSON array instead of YAML
    #[arg(long)]
    pub json: bool,
}
