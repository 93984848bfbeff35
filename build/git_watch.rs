//! The files whose change means a new git revision, for `build.rs` to watch. A path cargo is
//! told to watch that does not exist makes it rerun the build script at every build: in a git
//! worktree `.git` is a file, so the old fixed `.git/HEAD` rebuilt the crate at every run.
//! Included by `build.rs` and by the library's unit tests; standard library only.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The existing files that change with the checkout's revision: its own `HEAD` (a worktree has
/// one of its own), the branch's ref file and `packed-refs` in the common git directory. Empty
/// outside a git checkout.
pub fn watched(dir: &Path) -> Vec<PathBuf> {
    let absolute = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]).map(absolute) else {
        return Vec::new();
    };
    let common = git(dir, &["rev-parse", "--git-common-dir"])
        .map(absolute)
        .unwrap_or_else(|| git_dir.clone());
    let mut paths = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(common.join(branch));
    }
    paths.retain(|p| p.is_file());
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(status.status.success(), "git {args:?}: {status:?}");
    }

    #[test]
    fn a_worktree_watches_files_that_exist_and_its_own_head() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("main");
        std::fs::create_dir(&main).unwrap();
        run(&main, &["init", "-q", "-b", "main"]);
        run(&main, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let tree = dir.path().join("tree");
        run(
            &main,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "side",
                tree.to_str().unwrap(),
            ],
        );
        for checkout in [&main, &tree] {
            let paths = watched(checkout);
            assert!(paths.iter().all(|p| p.is_file()), "{paths:?}");
            assert!(paths.iter().any(|p| p.ends_with("HEAD")), "{paths:?}");
        }
        let in_tree = watched(&tree);
        assert!(
            in_tree.iter().any(|p| p.ends_with("worktrees/tree/HEAD")),
            "{in_tree:?}"
        );
        assert!(
            in_tree.iter().any(|p| p.ends_with("refs/heads/side")),
            "{in_tree:?}"
        );
        // Outside a checkout there is nothing to watch (and nothing missing to rerun on).
        assert!(watched(dir.path()).is_empty());
    }
}
