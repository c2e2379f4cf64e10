//! Completion of `kubectl mkv …` from kubectl itself. kubectl (1.26 and later) completes a
//! plugin's arguments by running `kubectl_complete-<plugin>` with the words typed after the
//! plugin's name, the last being the word under the cursor (possibly empty), and reads one
//! completion a line followed by `:<directive>` (cobra's protocol). `kubectl mkv __complete`
//! answers it: subcommands first, then the cluster's name, then a member's.

/// cobra's `ShellCompDirectiveNoFileComp`: do not fall back to file names.
const NO_FILE_COMP: u32 = 4;

/// The subcommands and what each takes after the cluster (`true`: a member).
pub const COMMANDS: &[(&str, bool)] = &[
    ("status", false),
    ("plan", false),
    ("remove", true),
    ("replace", true),
    ("pause", false),
    ("resume", false),
    ("hibernate", false),
    ("wake", false),
    ("fence", true),
    ("unfence", true),
    ("report", false),
    ("version", false),
    ("completion", false),
];

/// What is completed at the cursor, from the words typed (flags and their values left out).
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    Command,
    Cluster,
    Member { cluster: String },
    Shell,
    Nothing,
}

/// The namespace given with `-n`/`--namespace` among `args`, if any.
pub fn namespace(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-n" || a == "--namespace" {
            return it.next().cloned();
        }
        if let Some(ns) = a
            .strip_prefix("--namespace=")
            .or_else(|| a.strip_prefix("-n="))
        {
            return Some(ns.to_string());
        }
    }
    None
}

/// What the word under the cursor (the last of `args`) is.
pub fn want(args: &[String]) -> Want {
    let Some((_, before)) = args.split_last() else {
        return Want::Command;
    };
    let takes_value = [
        "-n",
        "--namespace",
        "--kubeconfig",
        "--context",
        "-o",
        "--output",
        "--since",
    ];
    let mut words = Vec::new();
    let mut skip = false;
    for a in before {
        if skip {
            skip = false;
        } else if takes_value.contains(&a.as_str()) {
            skip = true;
        } else if !a.starts_with('-') {
            words.push(a.as_str());
        }
    }
    match words.as_slice() {
        [] => Want::Command,
        ["completion"] => Want::Shell,
        [command] if COMMANDS.iter().any(|(c, _)| c == command) && *command != "version" => {
            Want::Cluster
        }
        [command, cluster] if COMMANDS.iter().any(|(c, member)| c == command && *member) => {
            Want::Member {
                cluster: cluster.to_string(),
            }
        }
        _ => Want::Nothing,
    }
}

/// cobra's answer: the `candidates` that start with the word under the cursor, then the directive.
pub fn answer(args: &[String], candidates: &[String]) -> String {
    let prefix = args.last().map_or("", String::as_str);
    let mut out: String = candidates
        .iter()
        .filter(|c| c.starts_with(prefix))
        .map(|c| format!("{c}\n"))
        .collect();
    out.push_str(&format!(":{NO_FILE_COMP}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn each_position_completes_what_it_takes() {
        assert_eq!(want(&args(&[""])), Want::Command);
        assert_eq!(want(&args(&["st"])), Want::Command);
        assert_eq!(
            want(&args(&["-n", "apps", ""])),
            Want::Command,
            "a flag's value is no word"
        );
        assert_eq!(want(&args(&["status", ""])), Want::Cluster);
        assert_eq!(want(&args(&["status", "-o", "json", "de"])), Want::Cluster);
        assert_eq!(
            want(&args(&["remove", "demo", ""])),
            Want::Member {
                cluster: "demo".into()
            }
        );
        assert_eq!(want(&args(&["status", "demo", ""])), Want::Nothing);
        assert_eq!(want(&args(&["completion", ""])), Want::Shell);
        assert_eq!(want(&args(&["version", ""])), Want::Nothing);
        assert_eq!(want(&args(&["nonsense", ""])), Want::Nothing);
    }

    #[test]
    fn the_namespace_flag_is_found_in_any_spelling() {
        assert_eq!(
            namespace(&args(&["-n", "apps", "status", ""])),
            Some("apps".into())
        );
        assert_eq!(
            namespace(&args(&["status", "--namespace=apps", ""])),
            Some("apps".into())
        );
        assert_eq!(namespace(&args(&["status", ""])), None);
    }

    #[test]
    fn the_answer_is_the_matching_candidates_then_no_file_completion() {
        let c = args(&["demo", "db", "demo-2"]);
        assert_eq!(answer(&args(&["status", "de"]), &c), "demo\ndemo-2\n:4\n");
        assert_eq!(answer(&args(&["status", "x"]), &c), ":4\n");
    }
}
