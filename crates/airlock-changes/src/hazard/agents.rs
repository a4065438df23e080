//! Files that the next shell, editor or coding agent opening the workspace reads as its
//! instructions, its tools or its startup code: one table, one reason a line, naming who reads
//! the file and what it does with it. Names are matched as [`super::is_one_of`] folds them. The
//! list grows by research; a dot-file or dot-directory no table here explains is a hazard anyway
//! ([`super::Hazard::UnexplainedDotPath`]).

/// Shell and tool startup files, wherever they are in the tree.
pub(super) const SHELL_STARTUP: &[(&str, &str)] = &[
    (
        ".envrc",
        "direnv: sourced by the next shell that enters the directory",
    ),
    (
        ".bashrc",
        "bash: sourced by interactive shells (HOME pointed at the workspace, a container)",
    ),
    (".bash_profile", "bash: sourced by login shells"),
    (".bash_login", "bash: sourced by login shells"),
    (".bash_logout", "bash: sourced when a login shell exits"),
    (".profile", "sh, dash, bash: sourced by login shells"),
    (
        ".zshrc",
        "zsh: sourced by interactive shells (ZDOTDIR pointed at the workspace)",
    ),
    (".zshenv", "zsh: sourced by every zsh"),
    (".zprofile", "zsh: sourced by login shells"),
    (".zlogin", "zsh: sourced by login shells"),
    (".zlogout", "zsh: sourced when a login shell exits"),
    (".kshrc", "ksh: sourced through ENV"),
    (".cshrc", "csh, tcsh: sourced by every shell"),
    (".tcshrc", "tcsh: sourced by every shell"),
    (
        ".inputrc",
        "readline: key bindings, a macro can type a command",
    ),
    (
        "config.fish",
        "fish: sourced by every fish (XDG_CONFIG_HOME pointed at the workspace)",
    ),
];

/// Agent instruction and configuration files, and editors' project files that run code, wherever
/// they are: the next coding agent that opens the workspace reads them as its instructions or its
/// tools (prompt injection, an MCP server or a hook started on the host).
pub(super) const AGENT_FILES: &[(&str, &str)] = &[
    (
        "CLAUDE.md",
        "Claude Code: project memory, read as instructions at every start",
    ),
    (
        "CLAUDE.local.md",
        "Claude Code: local project memory, read as instructions",
    ),
    (
        ".mcp.json",
        "Claude Code: project MCP servers, commands started on the host",
    ),
    (
        "AGENTS.md",
        "Codex, Copilot, Cursor, Amp, Jules, opencode, Factory, Zed and others: instructions",
    ),
    (
        "AGENTS.override.md",
        "Codex: instructions read in place of AGENTS.md",
    ),
    (
        "AGENT.md",
        "Amp, Zed: instructions (the older name of AGENTS.md)",
    ),
    ("GEMINI.md", "Gemini CLI: context read as instructions"),
    ("QWEN.md", "Qwen Code: context read as instructions"),
    ("CRUSH.md", "Crush: context read as instructions"),
    (
        ".crush.json",
        "Crush: project configuration, MCP servers and LSP commands",
    ),
    (
        "crush.json",
        "Crush: project configuration, MCP servers and LSP commands",
    ),
    ("WARP.md", "Warp: project rules read as instructions"),
    (".cursorrules", "Cursor, Zed: rules read as instructions"),
    (
        ".windsurfrules",
        "Windsurf, Zed: rules read as instructions",
    ),
    (".roorules", "Roo Code: rules read as instructions"),
    (
        ".roomodes",
        "Roo Code: custom modes, their instructions and the tools they may use",
    ),
    (
        ".kilocodemodes",
        "Kilo Code: custom modes, their instructions and the tools they may use",
    ),
    (".voidrules", "Void: rules read as instructions"),
    (".rules", "Zed: rules read as instructions"),
    (".goosehints", "Goose: hints read as instructions"),
    (
        ".augment-guidelines",
        "Augment: guidelines read as instructions",
    ),
    (".openhands_instructions", "OpenHands: instructions"),
    (
        "copilot-instructions.md",
        "GitHub Copilot (under .github/): instructions for every request",
    ),
    (
        ".aider.conf.yml",
        "aider: configuration, the files it reads and the commands it runs (lint, test)",
    ),
    (
        ".aider.model.settings.yml",
        "aider: model settings, where requests go",
    ),
    (".aider.model.metadata.json", "aider: model metadata"),
    (
        ".aider.chat.history.md",
        "aider: the chat replayed as the conversation so far (--restore-chat-history)",
    ),
    (
        "opencode.json",
        "opencode: configuration, MCP servers, plugins, commands",
    ),
    (
        "opencode.jsonc",
        "opencode: configuration, MCP servers, plugins, commands",
    ),
    (
        ".continuerc.json",
        "Continue: configuration, models and MCP servers",
    ),
    ("replit.md", "Replit Agent: instructions"),
    (".replit", "Replit: the run command and its environment"),
    (
        "replit.nix",
        "Replit: the Nix environment, packages built and run",
    ),
    (
        ".devcontainer.json",
        "Dev Containers (VS Code, Codespaces, devcontainer CLI): postCreateCommand and others run",
    ),
    (
        ".gitpod.yml",
        "Gitpod, Ona: tasks run when a workspace starts",
    ),
    (".exrc", "Vim, Neovim: run at start when 'exrc' is set"),
    (".nvimrc", "Neovim: run at start when 'exrc' is set"),
    (
        ".nvim.lua",
        "Neovim: run at start when 'exrc' is set (after a trust prompt)",
    ),
    (
        ".lazy.lua",
        "lazy.nvim: a local plugin spec, Lua run at start (after a trust prompt)",
    ),
    (
        ".dir-locals.el",
        "Emacs: directory variables, eval forms run (after a prompt)",
    ),
    (
        ".dir-locals-2.el",
        "Emacs: directory variables, eval forms run (after a prompt)",
    ),
];

/// Names that start so (`.roorules-code`, `.clinerules-architect`).
pub(super) const AGENT_PREFIXES: &[(&str, &str)] = &[
    (
        ".roorules-",
        "Roo Code: rules of one mode, read as instructions",
    ),
    (
        ".clinerules-",
        "Roo Code: rules of one mode, read as instructions",
    ),
];

/// Names that end so.
pub(super) const AGENT_SUFFIXES: &[(&str, &str)] = &[
    (
        ".code-workspace",
        "VS Code: a workspace file's settings and tasks, one may run when the folder opens",
    ),
    (
        ".sublime-project",
        "Sublime Text: build systems, commands run by a build",
    ),
];

/// Directories whose whole content configures an editor or agent (their settings, tasks that
/// run commands, rules, MCP servers, hooks, skills with scripts).
pub(super) const AGENT_DIRS: &[(&str, &str)] = &[
    (".vscode", "VS Code and its forks: tasks (one may run when the folder opens), launch, settings, mcp.json"),
    (".idea", "JetBrains IDEs: run configurations, external tools, startup tasks"),
    (".fleet", "JetBrains Fleet: run configurations and settings"),
    (".zed", "Zed: settings (language servers started) and tasks"),
    (".helix", "Helix: languages.toml, language servers started when a file opens"),
    (".devcontainer", "Dev Containers: devcontainer.json's commands, its Dockerfile"),
    (".idx", "Firebase Studio: dev.nix (packages, previews, commands on start), airules.md, mcp.json"),
    (".claude", "Claude Code: settings (hooks run commands, permissions), commands, agents, skills"),
    (".codex", "Codex: project configuration, MCP servers, skills"),
    (".agents", "Codex, Copilot, Amp: skills (instructions and scripts), commands"),
    (".cursor", "Cursor: rules, mcp.json, environment.json (commands of background agents)"),
    (".windsurf", "Windsurf: rules and workflows"),
    (".gemini", "Gemini CLI: settings.json (MCP servers, hooks), commands, styleguide"),
    (".qwen", "Qwen Code: settings (MCP servers), commands"),
    (".continue", "Continue: rules, prompts, configuration, MCP servers"),
    (".clinerules", "Cline, Roo Code, Zed: rules read as instructions (a file, or a directory of them and workflows)"),
    (".roo", "Roo Code: rules and mcp.json"),
    (".kilocode", "Kilo Code: rules, workflows and mcp.json"),
    (".opencode", "opencode: agents, commands and plugins (JavaScript run by opencode)"),
    (".kiro", "Kiro: steering, specs, hooks (commands run on file events), MCP settings"),
    (".junie", "Junie: guidelines and MCP servers"),
    (".amazonq", "Amazon Q Developer: rules, agents and mcp.json"),
    (".augment", "Augment: rules read as instructions"),
    (".crush", "Crush: its project data and configuration"),
    (".trae", "Trae: project rules"),
    (".factory", "Factory Droid: settings, hooks, MCP servers, droids, commands, skills"),
    (".openhands", "OpenHands: microagents (instructions) and setup.sh (run at every session start)"),
    (".tabnine", "Tabnine: agent settings (MCP servers, hooks) and guidelines"),
    (".sourcegraph", "Sourcegraph Cody and Amp: rules read as instructions"),
    (".aiassistant", "JetBrains AI Assistant: rules read as instructions"),
    (".zencoder", "Zencoder: rules read as instructions"),
];

/// Directories of `.github` an agent reads as its instructions or runs.
pub(super) const GITHUB_AGENT_DIRS: &[(&str, &str)] = &[
    (
        "instructions",
        "GitHub Copilot: *.instructions.md, read as instructions",
    ),
    ("prompts", "GitHub Copilot: reusable prompts"),
    (
        "chatmodes",
        "GitHub Copilot: chat modes, their instructions and tools",
    ),
    (
        "agents",
        "GitHub Copilot: custom agents, their instructions, tools and MCP servers",
    ),
    ("skills", "GitHub Copilot: skills, instructions and scripts"),
    ("hooks", "GitHub Copilot: hooks, commands run by the agent"),
];

/// Directories of `.gitlab` an agent reads as its instructions or runs.
pub(super) const GITLAB_AGENT_DIRS: &[(&str, &str)] = &[(
    "duo",
    "GitLab Duo: chat rules, MCP servers, the agent's setup commands",
)];

/// CI configuration directories: their content runs with the repository's secrets.
pub(super) const CI_DIRS: &[(&str, &str)] = &[
    (
        ".circleci",
        "CircleCI: config.yml, jobs run on the next push",
    ),
    (".buildkite", "Buildkite: pipelines run on the next push"),
    (".gitea", "Gitea Actions: workflows"),
    (".forgejo", "Forgejo Actions: workflows"),
];

/// CI configuration files.
pub(super) const CI_FILES: &[(&str, &str)] = &[
    (".gitlab-ci.yml", "GitLab CI: jobs run on the next push"),
    (".travis.yml", "Travis CI: jobs run on the next push"),
    ("Jenkinsfile", "Jenkins: the pipeline run on the next push"),
    (
        "azure-pipelines.yml",
        "Azure Pipelines: jobs run on the next push",
    ),
    (".drone.yml", "Drone: pipelines run on the next push"),
    (
        "bitbucket-pipelines.yml",
        "Bitbucket Pipelines: jobs run on the next push",
    ),
    (
        ".woodpecker.yml",
        "Woodpecker CI: pipelines run on the next push",
    ),
];

/// Names only.
pub(super) fn names<'t>(
    table: &'t [(&'static str, &'static str)],
) -> impl Iterator<Item = &'static str> + 't {
    table.iter().map(|(name, _)| *name)
}
