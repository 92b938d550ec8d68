package tools

// Builtin returns the built-in tools with the default limits.
func Builtin() []Tool { return BuiltinWith(DefaultLimits()) }

// BuiltinWith returns the built-in tools using the given limits (zero
// fields take their defaults).
func BuiltinWith(l Limits) []Tool {
	l = l.WithDefaults()
	return []Tool{
		ReadFile{Limits: l},
		ListFiles{Limits: l},
		Glob{Limits: l},
		Grep{Limits: l},
		WriteFile{Limits: l},
		EditFile{Limits: l},
		Bash{Limits: l},
		WebFetch{Limits: l},
		Agent{},
		TodoWrite{},
	}
}

// DefaultWith is Default with the built-in tools using the given limits.
func DefaultWith(l Limits) *Registry {
	ts := append(BuiltinWith(l), extra...)
	return NewRegistry(ts...)
}
