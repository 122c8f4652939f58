use std::ffi::OsString;
use std::path::Path;

/// Components reachable as `yarilo-<name>` links. Only those that exist.
/// `yarilo links` prints this list; the images (images/) and the Nix
/// package (flake.nix) make one link per entry, so a new component is one
/// line here.
pub const LINKED: &[&str] = &[
    "single",
    "config",
    "auth",
    "locks",
    "warden",
    "director",
    "backend-reg",
    "imap",
    "imap-login",
    "pop3",
    "pop3-login",
    "submission",
    "submission-login",
    "lmtp",
    "lmtp-login",
    "quota-status",
];

/// argv with the component inserted when the program was invoked through a
/// `yarilo-<component>` link.
pub fn effective_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.collect();
    let Some(argv0) = args.first() else {
        return args;
    };
    let name = Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if let Some(component) = name.strip_prefix("yarilo-") {
        if LINKED.contains(&component) {
            args.insert(1, OsString::from(component));
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(v: &[&str]) -> Vec<String> {
        effective_args(v.iter().map(OsString::from))
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    #[test]
    fn link_name_selects_the_component() {
        assert_eq!(
            run(&["/usr/bin/yarilo-single", "--data", "d"]),
            ["/usr/bin/yarilo-single", "single", "--data", "d"]
        );
        assert_eq!(run(&["yarilo", "single"]), ["yarilo", "single"]);
        assert_eq!(run(&["yarilo-unknown", "x"]), ["yarilo-unknown", "x"]);
    }
}
