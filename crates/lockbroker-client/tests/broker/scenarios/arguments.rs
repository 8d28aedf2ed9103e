//! A step's arguments, with `$name.field` references resolved.

use super::*;

impl Replay {
    /// The argument `key`, with a `$name.field` resolved; null when absent.
    pub(super) fn arg(&self, label: &str, step: &Fields, key: &str) -> Result<Value, Failure> {
        self.resolve(label, step.get(key).unwrap_or(&Value::Null))
    }

    /// A name within the scenario, with the run's prefix before it.
    pub(super) fn name(&self, label: &str, step: &Fields, key: &str) -> Result<String, Failure> {
        match self.arg(label, step, key)? {
            Value::String(name) if !name.is_empty() => Ok(format!("{}{name}", self.prefix)),
            _ => Err(format!("{label}: {key} must name a {key}")),
        }
    }

    /// A string argument that must be there.
    pub(super) fn text(&self, label: &str, step: &Fields, key: &str) -> Result<String, Failure> {
        self.optional_text(label, step, key)?
            .ok_or_else(|| format!("{label}: {key} is missing"))
    }

    /// A string argument, or `None` when absent or null.
    pub(super) fn optional_text(
        &self,
        label: &str,
        step: &Fields,
        key: &str,
    ) -> Result<Option<String>, Failure> {
        match self.arg(label, step, key)? {
            Value::Null => Ok(None),
            Value::String(text) => Ok(Some(text)),
            other => Err(format!("{label}: {key} {other} is not a string")),
        }
    }

    pub(super) fn whole_arg(&self, label: &str, step: &Fields, key: &str) -> Result<u64, Failure> {
        whole(label, &self.arg(label, step, key)?)
    }

    pub(super) fn fence(&self, label: &str, step: &Fields) -> Result<u64, Failure> {
        self.whole_arg(label, step, "fence")
    }

    /// Whole milliseconds as a duration; `default` when absent, which
    /// without one this client cannot express.
    pub(super) fn duration(
        &self,
        label: &str,
        step: &Fields,
        key: &str,
        default: Option<Duration>,
    ) -> Result<Duration, Failure> {
        if !step.contains_key(key) {
            return default.ok_or_else(|| format!("{label}: this client needs {key}"));
        }
        Ok(Duration::from_millis(self.whole_arg(label, step, key)?))
    }

    pub(super) fn lease(&self, label: &str, step: &Fields) -> Result<Arc<Lease>, Failure> {
        let name = self.text(label, step, "lease")?;
        let lease = self.leases.get(&name);
        lease
            .cloned()
            .ok_or_else(|| format!("{label}: no lease {name:?}"))
    }

    /// `"$name.field"` is that field of a kept result; any other value is itself.
    pub(super) fn resolve(&self, label: &str, value: &Value) -> Result<Value, Failure> {
        let Some(reference) = value.as_str().and_then(|text| text.strip_prefix('$')) else {
            return Ok(value.clone());
        };
        let (name, field) = reference.split_once('.').unwrap_or((reference, ""));
        let kept = self.results.get(name).and_then(|result| result.get(field));
        kept.cloned()
            .ok_or_else(|| format!("{label}: {value} names no kept result's field"))
    }
}

/// A whole number of at least 0, as durations, limits and fences are.
pub(super) fn whole(label: &str, value: &Value) -> Result<u64, Failure> {
    let exact = value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0);
    let number = value.as_u64().or(exact.map(|f| f as u64));
    number.ok_or_else(|| format!("{label}: {value} is not a whole number of at least 0"))
}
