//! `airlock serve` and `airlock token`: the arguments as the server's configuration and as core's
//! token requests.

use std::process::ExitCode;

use anyhow::{Context, Result};

use airlock_core::tokens::{TokenRequest, TokenSummary};
use airlock_core::Role;

use crate::cli::{GlobalArgs, McpArgs, ReviewArgs, ServeArgs, TokenCommand};

pub fn serve(global: &GlobalArgs, args: ServeArgs) -> Result<ExitCode> {
    let listen = args
        .listen
        .as_deref()
        .map(airlock_serve::Listen::parse)
        .transpose()?;
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(airlock_serve::TlsFiles { cert, key }),
        _ => None,
    };
    let grace = airlock_core::units::parse_duration(&args.grace)
        .map(std::time::Duration::from_secs)
        .with_context(|| format!("--grace {:?}", args.grace))?;
    let agent_sandbox = match (args.agent_sandbox, &args.workspace) {
        (true, Some(workspace)) => Some(
            airlock_core::pod_runtime::PodBinding::new(workspace, args.profile, args.session)
                .context("--workspace")?,
        ),
        _ => None,
    };
    let (config, _) = airlock_core::config::load(args.config.as_deref())?;
    airlock_serve::serve(airlock_serve::ServeConfig {
        export: config.audit,
        listen,
        tls,
        clear_text_allowed: args.allow_clear_text,
        tokens_file: args.tokens_file,
        state_dir: global.state_dir.clone(),
        max_body: args.max_body,
        keep_output: args.max_output,
        quotas: airlock_serve::Quotas {
            requests_per_second: args.requests_per_second.max(1),
            runs_per_token: args.runs_per_token.max(1),
        },
        grace,
        host_names: args.host_names,
        warm: (args.warm, args.warm_max),
        agent_sandbox,
        sandboxd: airlock_serve::SandboxdPorts {
            rest: args.sandboxd_rest,
            grpc: args.sandboxd_grpc,
        },
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn mcp(global: &GlobalArgs, args: McpArgs) -> Result<ExitCode> {
    airlock_mcp::serve_stdio(airlock_mcp::StdioConfig {
        state_dir: global.state_dir.clone(),
        workspace: args.workspace,
        profile: args.profile,
        session: args.session,
        keep_output: args.max_output,
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The columns of `token list`, the workspace (a path, the longest) last.
const TOKEN_COLUMNS: [&str; 7] = [
    "ID",
    "STATE",
    "ROLE",
    "PROFILE",
    "NAME",
    "EXPIRES (UTC)",
    "WORKSPACE",
];

fn cells(token: &TokenSummary) -> [String; 7] {
    let record = &token.record;
    [
        record.id.clone(),
        serde_json::to_value(token.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        match record.role {
            Role::Agent => "agent",
            Role::Operator => "operator",
        }
        .to_string(),
        record.profile.clone(),
        record.name.clone().unwrap_or_else(|| "-".into()),
        token
            .expires_at
            .clone()
            .unwrap_or_else(|| "no expiry".into()),
        record
            .workspace
            .as_ref()
            .map_or_else(|| "-".into(), |w| w.display().to_string()),
    ]
}

pub fn token(global: &GlobalArgs, command: TokenCommand) -> Result<ExitCode> {
    let caller = crate::run::caller(global);
    match command {
        TokenCommand::Create(args) => {
            let request = TokenRequest {
                profile: args.profile,
                role: if args.role == "operator" {
                    Role::Operator
                } else {
                    Role::Agent
                },
                workspace: args.workspace,
                expires: args.expires,
                name: args.name,
            };
            let created = airlock_core::tokens::create_token(&caller, request)?;
            if args.json {
                crate::shown::out!("{}", serde_json::to_string(&created)?);
            } else {
                crate::shown::note!(
                    "airlock: token {} made; it is shown once, below — keep it where the automation reads its secrets",
                    created.summary.record.id
                );
            }
            // The contract scripts rely on: the token is stdout's last line.
            crate::shown::out!("{}", created.token);
        }
        TokenCommand::List(args) => {
            let tokens = airlock_core::tokens::list_tokens(&caller)?;
            if args.json {
                crate::shown::out!("{}", serde_json::to_string_pretty(&tokens)?);
            } else if tokens.is_empty() {
                crate::shown::note!(
                    "no tokens in {} — 'airlock token create' makes one",
                    caller.state_dir()?.display()
                );
            } else {
                let rows: Vec<[String; 7]> = tokens.iter().map(cells).collect();
                crate::shown::out!(text: crate::shown::table(TOKEN_COLUMNS, &rows));
            }
        }
        TokenCommand::Revoke(args) => {
            let revoked = airlock_core::tokens::revoke_token(&caller, &args.token)?;
            if args.json {
                crate::shown::out!("{}", serde_json::to_string(&revoked)?);
            } else {
                crate::shown::out!("revoked {}", cells(&revoked).join("  "));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `airlock review`: a one-time link to the page, made by core at the machine.
pub fn review(global: &GlobalArgs, args: ReviewArgs) -> Result<ExitCode> {
    use airlock_core::page_login::{create_review_link, page_address, LinkRequest};
    let caller = crate::run::caller(global);
    let base = match args.url {
        Some(url) => url,
        None => page_address(&caller)?.context(
            "no 'airlock serve' listens on TCP for this state directory: start one ('airlock serve --listen 127.0.0.1:8700'), or say where the page is with --url",
        )?,
    };
    let link = create_review_link(
        &caller,
        &LinkRequest {
            token: args.token,
            profile: args.profile,
        },
    )?;
    let url = format!("{}/login#code={}", base.trim_end_matches('/'), link.code);
    if args.json {
        crate::shown::out!(
            "{}",
            serde_json::json!({
                "url": url,
                "token_id": link.token_id,
                "profile": link.profile,
                "token_made": link.token_made,
                "expires_at": link.expires_at,
            })
        );
    } else {
        let made = if link.token_made {
            format!(" (a new operator token, {}, for 12 hours)", link.token_id)
        } else {
            format!(" (token {})", link.token_id)
        };
        crate::shown::note!(
            "airlock: the review page of profile '{}'{made}; the link works once, until {}:",
            link.profile,
            link.expires_at
        );
        crate::shown::out!("{url}");
    }
    Ok(ExitCode::SUCCESS)
}
