//! Skills in the Agent Skills format: a directory holding `SKILL.md`, whose YAML front matter
//! gives the skill's `name` (lowercase letters, digits and `-`, the directory's own name) and
//! `description`, and whose Markdown body is the instructions. They are found in
//! `~/.fabro/skills/`, `<repo>/.fabro/skills/` and `<repo>/skills/` (one level down; a later
//! directory's skill replaces an earlier one's of the same name), or in the directories
//! `skill_dirs` names instead. An agent stage lists them in its system prompt, loads one whole with
//! the `use_skill` tool, and a `/name rest` token in its prompt is replaced by the skill's text
//! (with `rest` in its `{{user_input}}`, else after it). A `SKILL.md` that cannot be read as a
//! skill is a warning naming the file, never a failed stage.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::chat::ToolDefinition;

/// The tool that loads a skill.
pub const TOOL: &str = "use_skill";
/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The instructions: `SKILL.md` after its front matter.
    pub body: String,
    /// The skill's directory (its other files are there).
    pub dir: PathBuf,
}

/// A `SKILL.md` that is not a skill, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillProblem {
    pub file: PathBuf,
    pub message: String,
}

/// The skill directories searched when `skill_dirs` names none, lowest first: the user's, then the
/// project's (the root of `work_dir`'s git repository, else `work_dir`).
pub fn default_dirs(work_dir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let root = git2::Repository::discover(work_dir)
        .ok()
        .and_then(|repo| repo.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| work_dir.to_path_buf());
    home.map(|home| home.join(".fabro/skills"))
        .into_iter()
        .chain([root.join(".fabro/skills"), root.join("skills")])
        .collect()
}

/// The directories of a `skill_dirs` value: relative ones against `work_dir`, `~/` against `home`.
pub fn named_dirs(names: &[String], work_dir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    names
        .iter()
        .map(|name| match (name.strip_prefix("~/"), home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => work_dir.join(name),
        })
        .collect()
}

/// The skills of `dirs` (a later directory's replaces an earlier one's of the same name), by name,
/// and the `SKILL.md` files that are not skills.
pub fn discover(dirs: &[PathBuf]) -> (Vec<Skill>, Vec<SkillProblem>) {
    let mut skills: Vec<Skill> = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut found: Vec<PathBuf> = entries.filter_map(Result::ok).map(|entry| entry.path()).collect();
        found.sort();
        for skill_dir in found {
            // A link to a directory elsewhere is not followed (a stage may have planted it).
            if !skill_dir.symlink_metadata().is_ok_and(|meta| meta.is_dir()) {
                continue;
            }
            let file = skill_dir.join("SKILL.md");
            if file.symlink_metadata().is_err() {
                continue;
            }
            match read(&file, &skill_dir) {
                Ok(skill) => {
                    skills.retain(|earlier| earlier.name != skill.name);
                    skills.push(skill);
                }
                Err(message) => problems.push(SkillProblem { file, message }),
            }
        }
    }
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    (skills, problems)
}

/// The skill in `file` (the `SKILL.md` of `dir`).
fn read(file: &Path, dir: &Path) -> Result<Skill, String> {
    let bytes = crate::regular_file::read(file, crate::regular_file::FileKind::WorkFile)
        .map_err(|error| error.to_string())?;
    let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return Err(
            "it does not start with YAML front matter (a `---` line, `name:` and `description:`, `---`)"
                .into(),
        );
    };
    let Some((front, body)) = split_front_matter(rest) else {
        return Err("its front matter has no closing `---` line".into());
    };
    let docs = yaml_rust2::YamlLoader::load_from_str(front)
        .map_err(|error| format!("its front matter is not YAML: {error}"))?;
    let doc = docs.first().ok_or("its front matter is empty")?;
    let field =
        |key: &str| doc[key].as_str().map(str::trim).filter(|value| !value.is_empty()).map(str::to_string);
    let name = field("name").ok_or("its front matter has no `name`")?;
    let description = field("description").ok_or("its front matter has no `description`")?;
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        return Err(format!(
            "name `{name}` is not 1 to 64 lowercase letters, digits and `-`, starting with a letter"
        ));
    }
    let dir_name = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    if dir_name != name {
        return Err(format!("name `{name}` is not its directory's name `{dir_name}`; rename one of them"));
    }
    Ok(Skill { name, description, body: body.trim().to_string(), dir: dir.to_path_buf() })
}

/// The front matter and the body after its closing `---` line.
fn split_front_matter(rest: &str) -> Option<(&str, &str)> {
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..at], &rest[at + line.len()..]));
        }
        at += line.len();
    }
    None
}

/// The system prompt's list of skills; empty when there are none.
pub fn block(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Available skills\nWhen the task matches a skill below, call the use_skill tool with its name to load its \
         instructions, then follow them.\n",
    );
    for skill in skills {
        out.push_str(&format!("- `{}`: {}\n", skill.name, skill.description));
    }
    out
}

/// The `use_skill` tool.
pub fn tool_definition() -> ToolDefinition {
    ToolDefinition {
        name: TOOL.into(),
        description: "Load a skill's instructions by name (the skills are listed in the system prompt), then follow them.".into(),
        parameters: json!({"type": "object", "properties": {"skill_name": {"type": "string"}}, "required": ["skill_name"]}),
    }
}

/// What `use_skill(skill_name)` answers: the skill's text and where its files are; an unknown name
/// is an error naming the skills there are.
pub fn load(skills: &[Skill], arguments: &serde_json::Value) -> Result<String, String> {
    let name =
        arguments["skill_name"].as_str().map(|name| name.trim().trim_start_matches('/')).unwrap_or_default();
    match skills.iter().find(|skill| skill.name == name) {
        Some(skill) => Ok(format!(
            "# Skill `{}` (its files are in {}; read them with read_file)\n\n{}",
            skill.name,
            skill.dir.display(),
            skill.body
        )),
        None => Err(format!(
            "there is no skill `{name}`; the skills are {}",
            skills.iter().map(|skill| format!("`{}`", skill.name)).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// `text` with its first `/name rest` token that names a skill replaced by the skill's text:
/// `rest` (the text after the token) goes into its `{{user_input}}`, else after it. The `/` must
/// start the text or follow whitespace, and the name must end the text or be followed by
/// whitespace (so paths such as `/usr/bin` are left alone). `None` when nothing was expanded.
pub fn expand<'s>(text: &str, skills: &'s [Skill]) -> Option<(String, &'s Skill)> {
    let mut search = 0;
    while let Some(found) = text[search..].find('/') {
        let at = search + found;
        search = at + 1;
        let starts = text[..at].chars().next_back().is_none_or(char::is_whitespace);
        let name_end = text[at + 1..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .map_or(text.len(), |end| at + 1 + end);
        let ends = text[name_end..].chars().next().is_none_or(char::is_whitespace);
        if !starts || !ends || name_end == at + 1 {
            continue;
        }
        let name = &text[at + 1..name_end];
        let Some(skill) = skills.iter().find(|skill| skill.name == name) else { continue };
        let rest = text[name_end..].trim();
        let expanded = if skill.body.contains("{{user_input}}") {
            skill.body.replace("{{user_input}}", rest)
        } else if rest.is_empty() {
            skill.body.clone()
        } else {
            format!("{}\n\n{rest}", skill.body)
        };
        return Some((format!("{}{expanded}", &text[..at]), skill));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("SKILL.md"), text).unwrap();
    }

    fn skill(name: &str, description: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    }

    #[test]
    fn later_directories_win_and_bad_files_are_problems_not_failures() {
        let temp = tempfile::tempdir().unwrap();
        let (user, project) = (temp.path().join("user"), temp.path().join("project"));
        write_skill(&user, "commit", &skill("commit", "Commit the work", "User commit rules."));
        write_skill(&user, "review", &skill("review", "Review a change", "Look for bugs."));
        write_skill(
            &project,
            "commit",
            &skill("commit", "Commit, the project's way", "Project commit rules."),
        );
        write_skill(&project, "broken", "no front matter\n");
        write_skill(&project, "unclosed", "---\nname: unclosed\n");
        write_skill(&project, "misnamed", &skill("other", "x", "y"));
        write_skill(&project, "nodesc", "---\nname: nodesc\n---\nbody\n");
        write_skill(&project, "badyaml", "---\nname: [unclosed\n---\nbody\n");
        let (skills, problems) = discover(&[user, project.clone(), temp.path().join("missing")]);
        let names: Vec<(&str, &str)> =
            skills.iter().map(|s| (s.name.as_str(), s.description.as_str())).collect();
        assert_eq!(names, [("commit", "Commit, the project's way"), ("review", "Review a change")]);
        assert_eq!(skills[0].body, "Project commit rules.");
        let mut problems: Vec<(String, String)> = problems
            .into_iter()
            .map(|p| {
                (p.file.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned(), p.message)
            })
            .collect();
        problems.sort();
        let files: Vec<&str> = problems.iter().map(|(file, _)| file.as_str()).collect();
        assert_eq!(files, ["badyaml", "broken", "misnamed", "nodesc", "unclosed"]);
        assert!(problems[2].1.contains("is not its directory's name `misnamed`"), "{problems:?}");
        assert!(problems[3].1.contains("no `description`"), "{problems:?}");
        let text = block(&skills);
        assert!(
            text.contains("- `commit`: Commit, the project's way\n- `review`: Review a change\n"),
            "{text}"
        );
    }

    #[test]
    fn a_slash_token_expands_to_the_skill_with_the_rest_of_the_text() {
        let skills = vec![
            Skill {
                name: "commit".into(),
                description: "d".into(),
                body: "Commit: {{user_input}}.".into(),
                dir: PathBuf::new(),
            },
            Skill {
                name: "review".into(),
                description: "d".into(),
                body: "Review carefully.".into(),
                dir: PathBuf::new(),
            },
        ];
        let (text, used) = expand("Please /commit fix the off-by-one", &skills).unwrap();
        assert_eq!((text.as_str(), used.name.as_str()), ("Please Commit: fix the off-by-one.", "commit"));
        assert_eq!(expand("/review the parser", &skills).unwrap().0, "Review carefully.\n\nthe parser");
        assert_eq!(expand("Run /usr/bin/env and /unknown x", &skills), None);
        assert_eq!(expand("a/review b", &skills), None);
        assert_eq!(expand("/review", &skills).unwrap().0, "Review carefully.");
        assert_eq!(expand("see /review\nthen /commit x", &skills).unwrap().1.name, "review");
        assert!(load(&skills, &json!({"skill_name": "/review"})).unwrap().ends_with("Review carefully."));
        assert!(load(&skills, &json!({"skill_name": "nope"}))
            .unwrap_err()
            .contains("the skills are `commit`, `review`"));
    }
}
