//! Configuration that ordinary commands of a project's tools read from the working tree, and
//! that runs code or redirects where code comes from: one table, one reason a line. What is
//! left out, and why, is listed too. Names are matched as [`super::is_one_of`] folds them.

/// A file of this name, wherever it is.
pub(super) const FILES: &[(&str, &str)] = &[
    (".npmrc", "npm: registry and script-shell, node-options for every script"),
    (".yarnrc", "yarn 1: registry and yarn-path, a JavaScript file every yarn command runs"),
    (".yarnrc.yml", "yarn 2+: yarnPath and plugins, JavaScript every yarn command runs"),
    (".pnpmfile.cjs", "pnpm: hooks run on every install"),
    ("pip.conf", "pip: index-url, where packages come from"),
    (".pypirc", "twine and pip: where uploads go"),
    ("uv.toml", "uv: indexes, where packages come from"),
    ("poetry.toml", "poetry: repositories and virtualenv settings"),
    ("gradle.properties", "Gradle: org.gradle.jvmargs, e.g. a -javaagent every build loads"),
    ("gradle-wrapper.properties", "Gradle wrapper: distributionUrl, the Gradle every ./gradlew downloads and runs"),
    (".sbtopts", "sbt: JVM options, e.g. a -javaagent"),
    (".jvmopts", "sbt: JVM options, e.g. a -javaagent"),
    (".bazelrc", "Bazel: flags of every build, action environments, startup options"),
    ("Directory.Build.props", "MSBuild: imported into every project under it"),
    ("Directory.Build.targets", "MSBuild: imported into every project under it"),
    ("NuGet.Config", "NuGet: package sources"),
    ("rust-toolchain", "rustup: which toolchain every cargo runs, a path to one included"),
    ("rust-toolchain.toml", "rustup: which toolchain every cargo runs, a path to one included"),
    (".pre-commit-config.yaml", "pre-commit: hooks run on every commit"),
    ("lefthook.yml", "lefthook: hooks run on git commands"),
    (".lefthook.yml", "lefthook: hooks run on git commands"),
    ("lefthook-local.yml", "lefthook: hooks run on git commands"),
    (".env", "dotenv loaders (direnv's dotenv, docker compose, frameworks): variables such as NODE_OPTIONS or LD_PRELOAD"),
    (".mise.toml", "mise: tools, environment and hooks on cd"),
    ("mise.toml", "mise: tools, environment and hooks on cd"),
    (".tool-versions", "asdf and mise: which plugin and version provides every tool"),
];

/// A file of this name in a directory of that name.
pub(super) const PAIRS: &[(&str, &str, &str)] = &[
    (
        ".cargo",
        "config.toml",
        "cargo: build.rustc-wrapper, target runners, aliases, registries",
    ),
    (
        ".cargo",
        "config",
        "cargo: build.rustc-wrapper, target runners, aliases, registries",
    ),
    (".bundle", "config", "bundler: gem sources and paths"),
];

/// Directories whose whole content configures a tool.
pub(super) const DIRS: &[(&str, &str)] = &[
    (".husky", "husky: git hooks (git's core.hooksPath)"),
    (
        ".mvn",
        "Maven: jvm.config, maven.config, extensions.xml loaded into every build",
    ),
    (".mise", "mise: tasks and configuration"),
    (
        ".yarn",
        "yarn 2+: releases/ (the yarn every command runs), plugins/, and cache/ (the packages a zero-install project runs)",
    ),
];

/// Names that start so (`.lintstagedrc`, `.lintstagedrc.json`, `.lintstagedrc.js`, …).
pub(super) const PREFIXES: &[(&str, &str)] =
    &[(".lintstagedrc", "lint-staged: commands run on every commit")];

/// Looked at and left out of this table, so that the next reader need not look again. A
/// dot-file among them is a hazard all the same unless `hazard/dotpath.rs` calls it inert: a
/// dot-file no table explains is configuration until a person names it.
#[allow(dead_code)]
pub(super) const LEFT_OUT: &[(&str, &str)] = &[
    (
        ".nvmrc",
        "selects one of the Node versions already installed; runs nothing of its own",
    ),
    (
        ".python-version",
        "selects one of the Pythons already installed",
    ),
    (
        "package.json, pyproject.toml, Cargo.toml, build.gradle, pom.xml",
        "the project's own manifest and build code: shown in full by the diff, as code is",
    ),
    (
        "Makefile, justfile",
        "code a person runs and reads in the diff",
    ),
    (
        ".editorconfig",
        "formatting settings; no key names a program (inert: hazard/dotpath.rs)",
    ),
    (
        ".prettierrc",
        "formatting settings, but its plugins are code Prettier loads: an unexplained dot-file",
    ),
];
