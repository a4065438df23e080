//! What the completion scripts add to clap_complete's: the names of the user's sessions and
//! profiles, asked of `airlock __complete` (core lists them) each time the shell completes one.
//! clap_complete's static scripts know the commands and options only, and its dynamic engine is
//! an unstable feature that would change how the scripts are installed.

use crate::cli::CompletionShell;

/// The commands whose first argument is a session (id or name).
const SESSION_COMMANDS: [&str; 4] = ["diff", "apply", "revert", "discard"];

/// clap_complete's script for `shell` with the names of sessions and profiles completed too.
pub fn with_names(shell: CompletionShell, script: String) -> String {
    match shell {
        CompletionShell::Bash => script + &bash(),
        CompletionShell::Fish => script + &fish(),
        CompletionShell::Zsh => zsh(&script),
    }
}

/// zsh completes each option's value by the function its spec names: clap_complete names
/// `_default` (files) for every one; the session's and the profile's are pointed at functions
/// that ask airlock, defined before the script registers itself.
fn zsh(script: &str) -> String {
    const NAMES: &str = r#"
# airlock: names of sessions and profiles, from 'airlock __complete'.
(( $+functions[_airlock_session_names] )) ||
_airlock_session_names() {
    local -a names; names=(${(f)"$(airlock __complete sessions 2>/dev/null)"})
    compadd -a names
}
(( $+functions[_airlock_profile_names] )) ||
_airlock_profile_names() {
    local -a names; names=(${(f)"$(airlock __complete profiles 2>/dev/null)"})
    compadd -a names
}

"#;
    let lines: Vec<String> = script
        .lines()
        .map(|line| {
            let session_option = line.contains("'--session=[") && line.contains("]:ID:_default'");
            let session_argument = line.contains("':session -- ") && line.contains(":_default'");
            let profile_option = (line.contains("-p+[Profile to apply")
                || line.contains("--profile=[Profile to apply"))
                && line.contains("]:NAME:_default'");
            if session_option || session_argument {
                line.replacen(":_default'", ":_airlock_session_names'", 1)
            } else if profile_option {
                line.replacen(":_default'", ":_airlock_profile_names'", 1)
            } else {
                line.to_string()
            }
        })
        .collect();
    let mut script = lines.join("\n");
    script.push('\n');
    match script.rfind("\nif [ \"$funcstack[1]\" = \"_airlock\" ]; then") {
        Some(at) => script.insert_str(at + 1, NAMES.trim_start()),
        None => script.push_str(NAMES),
    }
    script
}

fn bash() -> String {
    let commands = SESSION_COMMANDS.join("|");
    format!(
        r#"
# airlock: names of sessions and profiles, from 'airlock __complete', then clap's completion.
_airlock_names() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} what=
    case $prev in
        --session) what=sessions ;;
        -p|--profile) what=profiles ;;
    esac
    if [[ -z $what && $COMP_CWORD -eq 2 && $cur != -* ]]; then
        case ${{COMP_WORDS[1]}} in
            {commands}) what=sessions ;;
        esac
    fi
    if [[ -z $what && $COMP_CWORD -eq 3 && ${{COMP_WORDS[1]}} == policy && ${{COMP_WORDS[2]}} == show ]]; then
        what=profiles
    fi
    if [[ -n $what ]]; then
        COMPREPLY=($(compgen -W "$("${{COMP_WORDS[0]}}" __complete "$what" 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _airlock "$@"
}}
if [[ "${{BASH_VERSINFO[0]}}" -eq 4 && "${{BASH_VERSINFO[1]}}" -ge 4 || "${{BASH_VERSINFO[0]}}" -gt 4 ]]; then
    complete -F _airlock_names -o nosort -o bashdefault -o default airlock
else
    complete -F _airlock_names -o bashdefault -o default airlock
fi
"#
    )
}

fn fish() -> String {
    let mut script = String::from(
        "\n# airlock: names of sessions and profiles, from 'airlock __complete'.\n\
         complete -c airlock -l session -f -a '(airlock __complete sessions 2>/dev/null)'\n\
         complete -c airlock -s p -l profile -f -a '(airlock __complete profiles 2>/dev/null)'\n\
         complete -c airlock -n '__fish_seen_subcommand_from policy; and __fish_seen_subcommand_from show' \
         -f -a '(airlock __complete profiles 2>/dev/null)'\n",
    );
    for command in SESSION_COMMANDS {
        script.push_str(&format!(
            "complete -c airlock -n '__fish_airlock_using_subcommand {command}' -f -a '(airlock __complete sessions 2>/dev/null)'\n"
        ));
    }
    script
}
