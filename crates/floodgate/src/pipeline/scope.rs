//! Which requests a stage applies to, and what it counts them by.
//!
//! A stage without a [`Scope`] applies to every request and keys its limiter as the limiter
//! does: the request rate and concurrency limiters by [`Request::user`], the fleet shedder
//! by its one fleet-wide key. A scope changes that, request by request:
//! - [`When`]: the stage applies only to requests whose fields match (`method` is `POST`,
//!   `endpoint` starts with `/orders`); others pass it untouched, as if it were off;
//! - [`KeyTemplate`]: the key its limiter counts under, built from the request's fields
//!   (`{attributes.ip}`, `org/{attributes.org}/{user}`);
//! - [`Cost`]: what the request costs at this stage (the request's own cost by default);
//! - where the plan comes from ([`Scope::plan_from`]; the request's plan by default);
//! - [`IfMissing`]: what happens when a field the stage needs is absent.
//!
//! A request's fields are its [`Request`]'s: `user`, `plan`, `endpoint`, `priority`
//! (`critical`, `post`, `get` or `test`) and any `attributes.NAME` the caller passed.

use std::fmt;

use super::Request;
use crate::ConfigError;

/// One field of a request, named as in key templates and [`When`] conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// `user`: [`Request::user`].
    User,
    /// `plan`: [`Request::plan`].
    Plan,
    /// `endpoint`: [`Request::endpoint`] (absent when the request names none).
    Endpoint,
    /// `priority`: [`Request::priority`]'s name.
    Priority,
    /// `attributes.NAME`: the attribute `NAME` of [`Request::attributes`].
    Attribute(Box<str>),
}

impl Field {
    /// Parses `user`, `plan`, `endpoint`, `priority` or `attributes.NAME` (a name of 1 to 64
    /// ASCII letters, digits and `_ - .`); any other text is [`ConfigError::UnknownField`],
    /// naming it and listing the fields.
    pub fn parse(text: &str) -> Result<Field, ConfigError> {
        Ok(match text {
            "user" => Field::User,
            "plan" => Field::Plan,
            "endpoint" => Field::Endpoint,
            "priority" => Field::Priority,
            _ => match text.strip_prefix("attributes.") {
                Some(name) if valid_attribute_name(name) => Field::Attribute(name.into()),
                _ => {
                    return Err(ConfigError::UnknownField {
                        name: text.to_string(),
                        known: "user, plan, endpoint, priority and attributes.NAME (NAME: 1 to 64 ASCII letters, digits and `_ - .`)",
                    })
                }
            },
        })
    }

    /// The field's value in `request`; `None` when the request lacks it.
    pub fn value<'a>(&self, request: &Request<'a>) -> Option<&'a str> {
        match self {
            Field::User => Some(request.user),
            Field::Plan => Some(request.plan),
            Field::Endpoint => request.endpoint,
            Field::Priority => Some(request.priority.name()),
            Field::Attribute(name) => request.attribute(name),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::User => f.write_str("user"),
            Field::Plan => f.write_str("plan"),
            Field::Endpoint => f.write_str("endpoint"),
            Field::Priority => f.write_str("priority"),
            Field::Attribute(name) => write!(f, "attributes.{name}"),
        }
    }
}

/// Owned `(name, value)` pairs as the borrowed ones a [`Request`] takes
/// (`Request { attributes: &borrowed(&owned), .. }`).
pub fn borrowed(attributes: &[(String, String)]) -> Vec<(&str, &str)> {
    attributes
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

/// Whether `name` may name an attribute: 1 to 64 ASCII letters, digits and `_ - .`.
pub fn valid_attribute_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A store key built from a request's fields: text with fields in braces, as
/// `{attributes.ip}` or `org/{attributes.org}/{user}`. `{{` and `}}` stand for the braces
/// themselves, so `{{{attributes.org}}}/{user}` gives `{acme}/alice`, whose hash tag puts
/// every key of one organisation in one Redis Cluster slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    text: Box<str>,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

impl KeyTemplate {
    /// Parses a template; the error names `key` and the template when a brace is unmatched,
    /// a field unknown, or the template holds no field (every request would share one key).
    pub fn parse(text: &str) -> Result<KeyTemplate, ConfigError> {
        let invalid = |reason| ConfigError::invalid("key", format!("{text:?}"), reason);
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    return Err(invalid(
                        "has a `{` without its `}` (write `{{` for a brace)",
                    ));
                };
                let field = Field::parse(&rest[1..end]).map_err(|_| {
                    invalid("names an unknown field: fields are {user}, {plan}, {endpoint}, {priority} and {attributes.NAME}")
                })?;
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Field(field));
                rest = &rest[end + 1..];
            } else if c == '}' {
                return Err(invalid(
                    "has a `}` without its `{` (write `}}` for a brace)",
                ));
            } else {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        if !parts.iter().any(|p| matches!(p, Part::Field(_))) {
            return Err(invalid(
                "names no field, so every request would share one key",
            ));
        }
        Ok(KeyTemplate {
            text: text.into(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The fields the template reads, in order.
    pub fn fields(&self) -> impl Iterator<Item = &Field> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f),
            Part::Text(_) => None,
        })
    }

    /// The key for `request`; `Err` with the first field the request lacks.
    pub fn render(&self, request: &Request<'_>) -> Result<String, Field> {
        let mut key = String::with_capacity(self.text.len() + 16);
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Field(field) => {
                    key.push_str(field.value(request).ok_or_else(|| field.clone())?)
                }
            }
        }
        Ok(key)
    }
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A value pattern: text that must match exactly, where `*` stands for any run of characters
/// (`/orders*` matches `/orders` and `/orders/42`; `*` alone matches any value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: Box<str>,
}

impl Pattern {
    /// The pattern `text`.
    pub fn new(text: &str) -> Pattern {
        Pattern { text: text.into() }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let mut pieces = self.text.split('*');
        let first = pieces.next().unwrap_or("");
        let Some(mut rest) = value.strip_prefix(first) else {
            return false;
        };
        let pieces: Vec<&str> = pieces.collect();
        let Some((last, middle)) = pieces.split_last() else {
            return rest.is_empty(); // no `*`: the whole value had to match
        };
        for piece in middle {
            match rest.find(piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

/// The conditions a request must meet for a stage to apply: every field named must be present
/// and match one of its patterns. Empty: every request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct When {
    conditions: Vec<(Field, Vec<Pattern>)>,
}

impl When {
    /// Every request.
    pub fn always() -> When {
        When::default()
    }

    /// Adds a condition: `field` present and matching one of `patterns`.
    #[must_use]
    pub fn field(mut self, field: Field, patterns: Vec<Pattern>) -> When {
        self.conditions.push((field, patterns));
        self
    }

    /// The conditions, in the order added.
    pub fn conditions(&self) -> &[(Field, Vec<Pattern>)] {
        &self.conditions
    }

    /// Whether `request` meets every condition (a request lacking a field named here does not).
    pub fn matches(&self, request: &Request<'_>) -> bool {
        self.conditions.iter().all(|(field, patterns)| {
            field
                .value(request)
                .is_some_and(|v| patterns.iter().any(|p| p.matches(v)))
        })
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (field, patterns)) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            let patterns: Vec<&str> = patterns.iter().map(Pattern::as_str).collect();
            write!(f, "{field} is {}", patterns.join(" or "))?;
        }
        Ok(())
    }
}

/// What a request costs at a stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cost {
    /// The request's own cost ([`Request::cost`]), else its endpoint's configured cost,
    /// else 1.
    #[default]
    Request,
    /// The same for every request.
    Constant(u64),
    /// A field holding a whole number (a request whose field is not one is refused with 400).
    Field(Field),
}

/// What a stage does with a request that lacks a field its key, cost or plan needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IfMissing {
    /// Refuse the request with 400, naming the stage and the field (default): a request
    /// that cannot be counted is a caller's mistake, not a reason to let it through.
    #[default]
    Refuse,
    /// Let the stage pass the request untouched, as if its `when` did not match.
    Skip,
}

/// Which requests a stage applies to and what it counts them by. See the [module
/// documentation](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    pub(super) when: When,
    pub(super) key: Option<KeyTemplate>,
    pub(super) cost: Cost,
    pub(super) plan: Option<Field>,
    pub(super) if_missing: IfMissing,
}

impl Scope {
    /// Every request, keyed as the limiter keys it, at its own cost and plan.
    pub fn all() -> Scope {
        Scope::default()
    }

    /// Only requests meeting `when`.
    #[must_use]
    pub fn when(mut self, when: When) -> Scope {
        self.when = when;
        self
    }

    /// Counts requests under `key` instead of the limiter's own key (the user's; the fleet
    /// shedder and the utilization shedder take none).
    #[must_use]
    pub fn key(mut self, key: KeyTemplate) -> Scope {
        self.key = Some(key);
        self
    }

    /// What requests cost here.
    #[must_use]
    pub fn cost(mut self, cost: Cost) -> Scope {
        self.cost = cost;
        self
    }

    /// Takes the plan's name from `field` instead of [`Request::plan`] (a value that names
    /// no plan gets the default plan).
    #[must_use]
    pub fn plan_from(mut self, field: Field) -> Scope {
        self.plan = Some(field);
        self
    }

    /// What to do when a needed field is absent (default [`IfMissing::Refuse`]).
    #[must_use]
    pub fn if_missing(mut self, if_missing: IfMissing) -> Scope {
        self.if_missing = if_missing;
        self
    }

    /// The condition.
    pub fn condition(&self) -> &When {
        &self.when
    }

    /// The key template, when the scope sets one.
    pub fn key_template(&self) -> Option<&KeyTemplate> {
        self.key.as_ref()
    }

    /// The cost.
    pub fn cost_source(&self) -> &Cost {
        &self.cost
    }

    /// Where the plan comes from, when not from the request.
    pub fn plan_field(&self) -> Option<&Field> {
        self.plan.as_ref()
    }

    /// What happens when a needed field is absent.
    pub fn missing_policy(&self) -> IfMissing {
        self.if_missing
    }

    /// The plan name for `request`.
    pub(super) fn plan<'a>(&self, request: &Request<'a>) -> &'a str {
        match &self.plan {
            Some(field) => field.value(request).unwrap_or(""),
            None => request.plan,
        }
    }

    /// The cost of `request`, with `configured` the limiter's own cost for it; `Err` names a
    /// field that is absent or not a whole number.
    pub(super) fn cost_of(
        &self,
        request: &Request<'_>,
        configured: impl FnOnce() -> u64,
    ) -> Result<u64, Field> {
        match &self.cost {
            Cost::Request => Ok(request.cost.unwrap_or_else(configured)),
            Cost::Constant(n) => Ok(*n),
            Cost::Field(field) => field
                .value(request)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| field.clone()),
        }
    }

    /// The first field this scope needs that `request` lacks (or holds a cost that is not a
    /// whole number), for a request its `when` matches.
    pub(super) fn lacking(&self, request: &Request<'_>) -> Option<Field> {
        let mut needed = self.key.iter().flat_map(KeyTemplate::fields);
        if let Some(field) = needed.find(|f| f.value(request).is_none()) {
            return Some(field.clone());
        }
        if let Some(field) = self.plan.as_ref().filter(|f| f.value(request).is_none()) {
            return Some(field.clone());
        }
        self.cost_of(request, || 1).err()
    }
}

/// A request that lacks a field a stage needs (or whose cost field is not a whole number).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stage `{stage}` needs `{field}`, which the request {problem}")]
pub struct MissingField {
    /// The stage's name.
    pub stage: String,
    /// The field.
    pub field: Field,
    /// "lacks", or "holds as something other than a whole number" for a cost.
    pub problem: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Priority;

    fn request<'a>(attributes: &'a [(&'a str, &'a str)]) -> Request<'a> {
        Request {
            attributes,
            endpoint: Some("/orders/42"),
            ..Request::new("alice", "free", Priority::Post)
        }
    }

    #[test]
    fn templates_render_fields_and_escaped_braces() {
        let attrs = [("org", "acme"), ("ip", "10.0.0.1")];
        let r = request(&attrs);
        let t = KeyTemplate::parse("{{{attributes.org}}}/{user}").unwrap();
        assert_eq!(t.render(&r).unwrap(), "{acme}/alice");
        let t = KeyTemplate::parse("{attributes.ip}:{endpoint}:{priority}:{plan}").unwrap();
        assert_eq!(t.render(&r).unwrap(), "10.0.0.1:/orders/42:post:free");
        let t = KeyTemplate::parse("{attributes.tenant}").unwrap();
        assert_eq!(
            t.render(&r),
            Err(Field::Attribute("tenant".into())),
            "an absent attribute is named"
        );
    }

    #[test]
    fn bad_templates_are_refused_naming_the_key() {
        for bad in ["{user", "user}", "{nobody}", "plain", "{attributes.}", "{}"] {
            let err = KeyTemplate::parse(bad).unwrap_err();
            assert!(err.to_string().contains("key"), "{bad}: {err}");
            assert!(err.to_string().contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn patterns_match_with_stars_anywhere() {
        let p = Pattern::new("/orders*");
        assert!(p.matches("/orders") && p.matches("/orders/42"));
        assert!(!p.matches("/order") && !p.matches("/v1/orders"));
        assert!(Pattern::new("*").matches("") && Pattern::new("*").matches("x"));
        assert!(Pattern::new("POST").matches("POST") && !Pattern::new("POST").matches("POSTS"));
        let p = Pattern::new("/v*/orders/*/items");
        assert!(p.matches("/v1/orders/42/items"));
        assert!(!p.matches("/v1/orders/42/items/7"));
        assert!(Pattern::new("a*a").matches("aa") && !Pattern::new("a*a").matches("a"));
    }

    #[test]
    fn when_needs_every_condition_and_a_present_field() {
        let attrs = [("method", "POST")];
        let when = When::always()
            .field(
                Field::parse("attributes.method").unwrap(),
                vec![Pattern::new("POST"), Pattern::new("PUT")],
            )
            .field(Field::Endpoint, vec![Pattern::new("/orders*")]);
        assert!(when.matches(&request(&attrs)));
        assert!(!when.matches(&request(&[("method", "GET")])));
        assert!(!when.matches(&request(&[])), "absent: no match");
        assert_eq!(
            when.to_string(),
            "attributes.method is POST or PUT and endpoint is /orders*"
        );
    }

    #[test]
    fn scopes_name_what_a_request_lacks() {
        let scope = Scope::all()
            .key(KeyTemplate::parse("{attributes.org}").unwrap())
            .cost(Cost::Field(Field::parse("attributes.units").unwrap()));
        let lacking = |attrs: &[(&str, &str)]| scope.lacking(&request(attrs));
        assert_eq!(
            lacking(&[("units", "3")]),
            Some(Field::Attribute("org".into()))
        );
        assert_eq!(
            lacking(&[("org", "acme"), ("units", "x")]),
            Some(Field::Attribute("units".into()))
        );
        assert_eq!(lacking(&[("org", "acme"), ("units", "3")]), None);
        assert_eq!(scope.cost_of(&request(&[("units", "3")]), || 9), Ok(3));
        assert_eq!(Scope::all().cost_of(&request(&[]), || 9), Ok(9));
    }
}
