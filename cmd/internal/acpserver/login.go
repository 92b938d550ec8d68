package acpserver

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/term"

	"github.com/iac-code/iac-code/llm"
)

// loginCommand is the subcommand that stores an API key. ACP's terminal
// auth method runs the agent's own invocation with it appended (`iac-code
// acp login`), so it is understood after `acp` too.
const loginCommand = "login"

// runLogin asks for a provider and its API key and keeps the key in
// $IAC_CODE_HOME/.credentials.yml (mode 0600, written atomically). When
// the provider is not the one that would be used, it becomes
// settings.yml's activeProvider. Exit status 0 means a key is stored: the
// client of a terminal auth method then retries.
func runLogin(name string, args []string, stdin io.Reader, stdout, stderr io.Writer, isTTY bool) int {
	fs := flag.NewFlagSet(loginCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	provider := fs.String("provider", "", "provider key (anthropic, openai, …; default: the configured one)")
	keyStdin := fs.Bool("key-stdin", false, "read the API key from stdin (for scripts), without asking anything")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, name+" login:", err)
		return 1
	}
	// Only the home: a server setting that is invalid must not stop a login.
	home, err := homeDir(os.Getenv)
	if err != nil {
		return fail(err)
	}
	current, err := llm.LoadConfig(home, os.Getenv)
	if err != nil {
		return fail(err)
	}
	in := bufio.NewReader(stdin)
	chosen := strings.TrimSpace(*provider)
	if chosen == "" && !*keyStdin {
		fmt.Fprintf(stdout, "Providers: %s\nProvider [%s]: ", strings.Join(llm.Known(), ", "), current.Provider)
		line, err := in.ReadString('\n')
		if err != nil && line == "" {
			return fail(errors.New("no provider given"))
		}
		chosen = strings.TrimSpace(line)
	}
	if chosen == "" {
		chosen = current.Provider
	}
	if !slices.Contains(llm.Known(), chosen) {
		return fail(fmt.Errorf("unknown provider %q (known: %s)", chosen, strings.Join(llm.Known(), ", ")))
	}
	var key string
	switch {
	case *keyStdin:
		b, err := io.ReadAll(in)
		if err != nil {
			return fail(err)
		}
		key = strings.TrimSpace(string(b))
	case isTTY:
		fd := int(os.Stdin.Fd())
		restore := hideTyping(fd)
		fmt.Fprintf(stdout, "API key for %s (not shown): ", chosen)
		b, err := term.ReadPassword(fd)
		restore()
		fmt.Fprintln(stdout)
		if err != nil {
			return fail(err)
		}
		key = strings.TrimSpace(string(b))
	default:
		fmt.Fprintf(stdout, "API key for %s: ", chosen)
		line, _ := in.ReadString('\n')
		key = strings.TrimSpace(line)
	}
	if key == "" || strings.ContainsAny(key, "\r\n") {
		return fail(errors.New("no API key given; nothing was changed"))
	}
	if err := llm.SaveCredential(home, chosen, key); err != nil {
		return fail(err)
	}
	if chosen != current.Provider {
		if err := llm.SetActiveProvider(home, chosen); err != nil {
			return fail(err)
		}
		if os.Getenv("IAC_CODE_PROVIDER") != "" {
			fmt.Fprintf(stderr, "note: IAC_CODE_PROVIDER=%s in the environment still selects that provider\n", os.Getenv("IAC_CODE_PROVIDER"))
		}
	}
	fmt.Fprintf(stdout, "Saved the API key for %s in %s.\n", chosen, home+string(os.PathSeparator)+llm.CredentialsFile)
	return 0
}

func loginMain(name string, args []string) int {
	return runLogin(name, args, os.Stdin, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stdin.Fd())))
}
