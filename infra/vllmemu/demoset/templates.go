package demoset

var taskOrder = []string{"gsm8k", "math", "mmlu", "mbpp", "trivia_qa", "commonsense_qa", "chat"}

// templates[task][level] are prompt templates; see fill for the slots.
var templates = map[string][3][]string{
	"gsm8k": {
		{"{name} has {N} apples and buys {N} more. How many apples does {name} have now?",
			"A box holds {N} pencils. How many pencils are in {N} boxes?"},
		{"{name} earns ${M} a week and saves a quarter of it. How much does {name} save in {N} weeks?",
			"A train travels {M} km in {N} hours. At the same speed, how far does it travel in {N} hours?"},
		{"{name} buys {N} notebooks at ${N} each and {N} pens at ${N} each, pays with ${K} and gets a {N}% discount on the total. How much change does {name} receive?",
			"A tank fills at {N} liters per minute and leaks {N} liters every {N} minutes. Starting empty, how long until it holds {M} liters?"},
	},
	"math": {
		{"Solve for x: {N}x + {N} = {M}.", "Compute {N}^2 + {N}^2."},
		{"Find all real roots of x^2 - {N}x + {N} = 0.", "What is the sum of the first {M} positive odd integers?"},
		{"Prove that the number of lattice points inside the circle x^2 + y^2 = {M} is odd, or give a counterexample.",
			"Let f be a polynomial of degree {N} with f(k) = 1/k for k = 1..{N}. Determine f(0)."},
	},
	"mmlu": {
		{"Which planet is known as the Red Planet? A) Venus B) Mars C) Jupiter D) Saturn",
			"What is the chemical symbol for {element}? Choose the correct option."},
		{"In economics, what does a {econ} primarily measure? Answer with A, B, C or D.",
			"Which amendment to the US Constitution concerns {amendment}? Pick one option."},
		{"A patient presents with {symptom} and elevated {marker}. Which of the following is the most likely diagnosis? A) B) C) D)",
			"Under {law}, which of the following contracts is voidable by the minor party? Choose the best answer."},
	},
	"mbpp": {
		{"Write a Python function that returns the {simple} of a list of numbers.",
			"Write a function to reverse a string in {lang}."},
		{"Write a Python function that checks whether a string is a palindrome, ignoring {ignore}.",
			"Write a function in {lang} that merges two sorted lists into one sorted list."},
		{"Implement an LRU cache in {lang} with O(1) get and put and a capacity of {M} entries, and include tests.",
			"Write a {lang} function that finds the longest increasing subsequence of an array of {K} integers in O(n log n)."},
	},
	"trivia_qa": {
		{"Who wrote {book}?", "What is the capital of {country}?"},
		{"In which year did {event} happen?", "Which river flows through {city}?"},
		{"Which {role} won the {prize} in {year}?", "What was the original name of the city now called {renamed}?"},
	},
	"commonsense_qa": {
		{"Where would you put {thing} to keep it cold? A) oven B) fridge C) drawer D) garden",
			"What do people usually use to {action}? Choose the best option."},
		{"If someone is {feeling} after a long day, what are they most likely to do? Choose one.",
			"Why might a {animal} avoid {place}? Pick the most sensible answer."},
		{"A {person} leaves the {thing} by the window overnight in winter and finds it cracked. What most likely happened? Explain the best option.",
			"Sam said the meeting with the {person} was 'a real picnic'. Given that everyone left early, what did Sam mean?"},
	},
	"chat": {
		{"Say hello to {name} in {language}.", "Suggest a name for a pet {animal}."},
		{"Write a short email to {name} asking to move our meeting to {day}.", "Give me three tips for learning {language}."},
		{"Write a detailed project plan for migrating a {M}-service monolith to {lang} microservices, with risks and milestones.",
			"Draft a persuasive essay arguing for and against {debate}, with a balanced conclusion."},
	},
}

var slots = map[string][]string{
	"name":      {"Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun"},
	"element":   {"gold", "sodium", "iron", "potassium", "silver", "tin"},
	"econ":      {"GDP deflator", "Gini coefficient", "consumer price index", "current account"},
	"amendment": {"freedom of speech", "the right to bear arms", "voting age", "income tax"},
	"symptom":   {"fatigue and joint pain", "chest pain on exertion", "polyuria and thirst", "night sweats"},
	"marker":    {"ESR", "troponin", "HbA1c", "CRP"},
	"law":       {"common law", "the UCC", "English contract law"},
	"simple":    {"sum", "maximum", "average", "product"},
	"lang":      {"Python", "Go", "Rust", "Java", "TypeScript"},
	"ignore":    {"case", "punctuation", "whitespace"},
	"book":      {"Hamlet", "Pride and Prejudice", "War and Peace", "Don Quixote", "The Odyssey"},
	"country":   {"Canada", "Kenya", "Peru", "Norway", "Vietnam", "Egypt"},
	"event":     {"the fall of the Berlin Wall", "the first Moon landing", "the signing of the Magna Carta", "the French Revolution"},
	"city":      {"Vienna", "Cairo", "Budapest", "Shanghai", "London"},
	"role":      {"physicist", "novelist", "economist", "chemist"},
	"prize":     {"Nobel Prize", "Booker Prize", "Fields Medal", "Wolf Prize"},
	"year":      {"1921", "1954", "1977", "1993", "2008"},
	"renamed":   {"Istanbul", "Ho Chi Minh City", "Saint Petersburg", "Kinshasa"},
	"thing":     {"milk", "a glass bottle of water", "ice cream", "butter"},
	"action":    {"cut paper", "dry their hair", "open a can", "write on a whiteboard"},
	"feeling":   {"exhausted", "hungry", "stressed", "cold"},
	"animal":    {"cat", "dog", "parrot", "rabbit", "goldfish"},
	"place":     {"a busy road", "water", "loud rooms", "open fields"},
	"person":    {"neighbour", "teacher", "landlord", "manager"},
	"language":  {"Spanish", "Japanese", "French", "Swahili", "German"},
	"day":       {"Monday", "Tuesday", "Thursday", "Friday"},
	"debate":    {"a four-day work week", "banning cars from city centres", "universal basic income", "nuclear power"},
}
