//! `Secret`: a string that configs read (passwords, secret keys, tokens) but that never shows up
//! in `Debug`/`Display` output, so a config struct can derive `Debug` and be logged safely.

/// A redacted string. `Debug` and `Display` print `***`; [`Secret::expose`] reads the value.
/// Deserializes transparently from a plain string. It deliberately does not implement
/// `Serialize`: writing a config back out must not copy secrets into a file.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret value; call this only where the value is handed to the library that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_prints_its_value() {
        let secret: Secret = serde_json::from_str("\"hunter2\"").expect("a JSON string");
        assert_eq!(secret.expose(), "hunter2");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(format!("{secret:?}"), "***");
        #[derive(Debug)]
        #[allow(dead_code)] // Only read through Debug.
        struct Holder {
            password: Secret,
        }
        let shown = format!("{:?}", Holder { password: secret });
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
