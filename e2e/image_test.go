package e2e

import (
	"bytes"
	"debug/elf"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.yaml.in/yaml/v3"
)

// The container image cannot be built here (no image registry), so this
// checks what it is made of: deploy/Dockerfile builds with deploy/build.sh
// (which this spec, run by CI, builds with too), the binary it makes is
// static, and that binary serves the manifest's probes and an initialize
// as the image's non-root user with the manifest's arguments.
var _ = Describe("the container image and its Kubernetes manifest", Label("e2e", "image"), func() {
	It("builds a static binary with the release flags that serves the probes and ACP as the image's user", func() {
		df := readRepoFile("deploy/Dockerfile")
		By("the Dockerfile builds with deploy/build.sh, runs as a numeric non-root user, enters iac-code")
		Expect(df).To(MatchRegexp(`(?m)^RUN deploy/build\.sh /out/iac-code `))
		Expect(strings.Count(df, "go build")).To(BeZero(), "the flags live in deploy/build.sh only")
		Expect(readRepoFile("Taskfile.yml")).To(ContainSubstring("deploy/build.sh"))
		Expect(df).To(MatchRegexp(`(?m)^ENTRYPOINT \["iac-code"\]$`))
		userLine := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindStringSubmatch(df)
		Expect(userLine).NotTo(BeNil(), "USER uid:gid, numeric (runAsNonRoot needs a number)")
		uid, _ := strconv.Atoi(userLine[1])
		Expect(uid).NotTo(BeZero())
		home := regexp.MustCompile(`(?m)^ENV IAC_CODE_HOME=(\S+)`).FindStringSubmatch(df)
		Expect(home).NotTo(BeNil())
		Expect(df).To(ContainSubstring(`VOLUME ["` + home[1] + `"]`))
		Expect(readRepoFile("deploy/build.sh")).To(ContainSubstring("CGO_ENABLED=0"))

		By("the manifest runs it read-only as that user, with the home and /tmp on volumes and HTTP probes")
		dep := deployment(readRepoFile("deploy/kubernetes.yaml"))
		pod := dep.Spec.Template.Spec
		Expect(pod.SecurityContext.RunAsNonRoot).To(BeTrue())
		Expect(pod.SecurityContext.RunAsUser).To(Equal(uid))
		Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
		Expect(c.SecurityContext.AllowPrivilegeEscalation).NotTo(BeNil())
		Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = true
		}
		Expect(mounts).To(HaveKey(home[1]))
		Expect(mounts).To(HaveKey("/tmp"))
		Expect(envValue(c.Env, "IAC_CODE_HOME")).To(Equal(home[1]))
		probes := []*probe{c.ReadinessProbe, c.LivenessProbe}
		for _, p := range probes {
			Expect(p).NotTo(BeNil())
			Expect(p.HTTPGet).NotTo(BeNil(), "an HTTP probe")
			Expect(p.HTTPGet.Port).To(Equal("http"))
		}

		By("deploy/build.sh makes a static binary")
		dir, err := os.MkdirTemp("", "iac-code-image-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		Expect(os.Chmod(dir, 0o755)).To(Succeed())
		bin := filepath.Join(dir, "iac-code")
		build := exec.Command("deploy/build.sh", bin, "9.9.9-e2e")
		build.Dir = ".."
		build.Stdout, build.Stderr = GinkgoWriter, GinkgoWriter
		Expect(build.Run()).To(Succeed())
		f, err := elf.Open(bin)
		Expect(err).NotTo(HaveOccurred())
		for _, p := range f.Progs {
			Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "a static binary has no dynamic loader")
		}
		libs, _ := f.ImportedLibraries()
		Expect(libs).To(BeEmpty())
		Expect(f.Section(".symtab")).To(BeNil(), "-s strips the symbol table")
		f.Close()
		out, err := exec.Command(bin, "--version").Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal("iac-code 9.9.9-e2e\n"))

		By("as the image's user, with the container's arguments, the probes answer without a token and ACP with it")
		args := containerArgs(c.Args)
		port := freePort()
		for i := range args {
			switch args[i] {
			case "0.0.0.0":
				args[i] = "127.0.0.1" // tests listen on loopback
			case "8765":
				args[i] = port
			}
		}
		homeDir := filepath.Join(dir, "home")
		Expect(os.Mkdir(homeDir, 0o700)).To(Succeed())
		cmd := exec.Command(bin, args...)
		cmd.Dir = homeDir
		env := []string{"IAC_CODE_HOME=" + homeDir, "HOME=" + homeDir, "PATH=/usr/bin:/bin",
			"IAC_CODE_PROVIDER=openai", "IAC_CODE_API_KEY=" + testAPIKey, "IAC_CODE_BASE_URL=http://127.0.0.1:9/v1"}
		if os.Getuid() == 0 {
			Expect(os.Chown(homeDir, uid, uid)).To(Succeed())
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		}
		a := startHTTPAgentCmd(cmd, env, "tok-image-1", port)
		for _, p := range probes {
			req, _ := http.NewRequest(http.MethodGet, a.base+p.HTTPGet.Path, nil)
			for _, h := range p.HTTPGet.HTTPHeaders {
				req.Header.Set(h.Name, h.Value)
			}
			resp, err := a.client.Do(req)
			Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusOK), p.HTTPGet.Path)
		}
		resp, err := a.client.Get(a.base + "/metrics")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "only /health is open")
		r := a.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		Expect(string(r.body)).To(ContainSubstring(`"protocolVersion":1`))
		Expect(a.check.Violations()).To(BeEmpty())
		a.sigterm(10 * time.Second)
	})
})

func readRepoFile(path string) string {
	b, err := os.ReadFile(filepath.Join("..", path))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(b)
}

// The parts of a Deployment this spec reads.
type (
	k8sDeployment struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
						RunAsUser    int  `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					Containers []k8sContainer `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	k8sContainer struct {
		Args            []string `yaml:"args"`
		SecurityContext struct {
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		} `yaml:"securityContext"`
		Env []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		VolumeMounts []struct {
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
	}
	probe struct {
		HTTPGet *struct {
			Path        string `yaml:"path"`
			Port        string `yaml:"port"`
			HTTPHeaders []struct {
				Name  string `yaml:"name"`
				Value string `yaml:"value"`
			} `yaml:"httpHeaders"`
		} `yaml:"httpGet"`
	}
)

func deployment(manifest string) k8sDeployment {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(manifest)))
	for {
		var d k8sDeployment
		if err := dec.Decode(&d); err != nil {
			Fail("no Deployment in the manifest: " + err.Error())
		}
		if d.Kind == "Deployment" {
			return d
		}
	}
}

func envValue(env []struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// containerArgs are the container's arguments without the cluster ones
// (this spec runs one process without a store).
func containerArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--cluster-listen" || args[i] == "--advertise" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
