//! Reading the lock's Lua as text, for the tests that hold the scripts to a rule (the ACL
//! rows, the grant and delete audit): comments blanked, names told apart.

/// `source` with its comments blanked (line breaks kept): a command a comment names is not one
/// the script runs. Strings, short and long, are kept.
pub fn strip_comments(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            quote @ ('"' | '\'') => {
                out.push(quote);
                i += 1;
                while i < s.len() {
                    let c = s[i];
                    out.push(c);
                    i += 1;
                    if c == '\\' && i < s.len() {
                        out.push(s[i]);
                        i += 1;
                    } else if c == quote || c == '\n' {
                        break;
                    }
                }
            }
            '-' if s.get(i + 1) == Some(&'-') => {
                let body = i + 2;
                let end = match long_bracket(&s, body) {
                    Some(level) => close_long_bracket(&s, body, level),
                    None => s[body..]
                        .iter()
                        .position(|&c| c == '\n')
                        .map_or(s.len(), |p| body + p),
                };
                out.extend(
                    s[i..end]
                        .iter()
                        .map(|&c| if c == '\n' { '\n' } else { ' ' }),
                );
                i = end;
            }
            '[' if let Some(level) = long_bracket(&s, i) => {
                let end = close_long_bracket(&s, i, level);
                out.extend(&s[i..end]);
                i = end;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The level of the long bracket (`[[`, `[=[`, ...) opening at `i`, if one does.
fn long_bracket(s: &[char], i: usize) -> Option<usize> {
    if s.get(i) != Some(&'[') {
        return None;
    }
    let level = s[i + 1..].iter().take_while(|&&c| c == '=').count();
    (s.get(i + 1 + level) == Some(&'[')).then_some(level)
}

/// Just past the close of the long bracket of `level` opened at `i` (or the end of the text).
fn close_long_bracket(s: &[char], i: usize, level: usize) -> usize {
    let close: Vec<char> = std::iter::once(']')
        .chain(std::iter::repeat_n('=', level))
        .chain(std::iter::once(']'))
        .collect();
    (i + level + 2..s.len())
        .find(|&j| s[j..].starts_with(&close))
        .map_or(s.len(), |j| j + close.len())
}

/// Whether the text just before byte `at` continues a name (`x.redis`, `myredis`), so that
/// what starts at `at` is not a name of its own.
pub fn inside_a_name(code: &str, at: usize) -> bool {
    code[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':')
}
