include tools/make/k8sbins.mk
