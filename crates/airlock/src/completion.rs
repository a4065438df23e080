//! What the completion scripts add to clap_complete's: the names of the user's sessions and
//! profiles, asked of `airlock __complete` (core lists them) each time the shell completes one.
//! clap_complete's static scripts know the commands and options only, and its dynamic engine is
//! an unstable feature that would change how the scripts are installed.

use crate::cli::CompletionShell;

/// The commands whose first argument is a session (id or name).
const SESSION_COMMANDS: [&str; 4] = ["diff", "apply", "revert", "discard"];

/// The script that follows clap_complete's for `shell`: empty where there is none (zsh).
pub fn names_hook(shell: CompletionShell) -> String {
    match shell {
        CompletionShell::Bash => bash(),
        CompletionShell::Fish => fish(),
        CompletionShell::Zsh => String::new(),
    }
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
