package protocol

// ACP v1 method names.
const (
	MethodInitialize       = "initialize"
	MethodAuthenticate     = "authenticate"
	MethodLogout           = "logout"
	MethodSessionNew       = "session/new"
	MethodSessionLoad      = "session/load"
	MethodSessionResume    = "session/resume"
	MethodSessionFork      = "session/fork"
	MethodSessionList      = "session/list"
	MethodSessionClose     = "session/close"
	MethodSessionDelete    = "session/delete"
	MethodSessionSetMode   = "session/set_mode"
	MethodSessionSetConfig = "session/set_config_option"
	// MethodSessionSetModel is the unstable model picker of older clients
	// (removed from the spec in favour of the model config option).
	MethodSessionSetModel   = "session/set_model"
	MethodSessionPrompt     = "session/prompt"
	MethodSessionCancel     = "session/cancel"
	MethodSessionUpdate     = "session/update"
	MethodRequestPermission = "session/request_permission"
	MethodCancelRequest     = "$/cancel_request"
	MethodElicitationCreate = "elicitation/create"

	MethodReadTextFile    = "fs/read_text_file"
	MethodWriteTextFile   = "fs/write_text_file"
	MethodTerminalCreate  = "terminal/create"
	MethodTerminalOutput  = "terminal/output"
	MethodTerminalWait    = "terminal/wait_for_exit"
	MethodTerminalKill    = "terminal/kill"
	MethodTerminalRelease = "terminal/release"
)

// aliases maps the names used by the iac-code specification document to the
// official ACP v1 names. It is the only place aliases are resolved.
var aliases = map[string]string{
	"sessions/list":      MethodSessionList,
	"config/set":         MethodSessionSetConfig,
	"request_permission": MethodRequestPermission,
}

// CanonicalMethod resolves a method alias to its ACP v1 name.
func CanonicalMethod(method string) string {
	if canonical, ok := aliases[method]; ok {
		return canonical
	}
	return method
}
